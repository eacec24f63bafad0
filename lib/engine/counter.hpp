#pragma once
/// A count with one writer at a time (the thread running an event
/// listener's loop) and readers on any thread: a relaxed atomic the writer
/// loads and stores (no read-modify-write, no lock prefix: as cheap as a
/// plain add on x86-64), so a reader sees it whole. metrics.hpp's counts,
/// the engine's and the modules'.

#include <atomic>
#include <cstdint>

namespace cordma::detail {

class counter {
public:
    void add([[maybe_unused]] std::uint64_t n = 1) noexcept {
#ifndef CORDMA_METRICS_OFF  // meson -Dmetrics=false: only to measure what counting costs
        value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
    }
    /// Makes it `v` (a gauge).
    void set([[maybe_unused]] std::uint64_t v) noexcept {
#ifndef CORDMA_METRICS_OFF
        value_.store(v, std::memory_order_relaxed);
#endif
    }
    /// Keeps the larger of the count and `v` (a maximum).
    void raise_to([[maybe_unused]] std::uint64_t v) noexcept {
#ifndef CORDMA_METRICS_OFF
        if (v > value_.load(std::memory_order_relaxed))
            value_.store(v, std::memory_order_relaxed);
#endif
    }
    std::uint64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> value_{0};
};

}  // namespace cordma::detail
