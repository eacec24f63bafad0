#pragma once
/// A latency histogram being counted (latency_histogram.hpp): written by
/// the thread running an event listener's loop, read whole by a snapshot
/// on any thread (counter.hpp), in one listener's connection_registry per
/// operation kind.

#include <array>
#include <cstdint>

#include <cordma/latency_histogram.hpp>
#include "engine/counter.hpp"

namespace cordma::detail {

struct latency_recorder {
    std::array<counter, latency_histogram::bucket_count> counts;
    counter sum;
    counter max;

    /// The loop's thread.
    void record(std::uint64_t ticks) noexcept {
        counts[latency_histogram::bucket_of(ticks)].add();
        sum.add(ticks);
        max.raise_to(ticks);
    }
    /// Any thread: every count read once.
    latency_histogram read(double ns_per_tick) const noexcept {
        latency_histogram h;
        for (std::size_t i = 0; i < latency_histogram::bucket_count; ++i)
            h.counts[i] = counts[i].get();
        h.sum_ticks = sum.get();
        h.max_ticks = max.get();
        h.ns_per_tick = ns_per_tick;
        return h;
    }
};

}  // namespace cordma::detail
