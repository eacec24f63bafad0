#pragma once
/// The clock of latency histograms (latency_histogram.hpp): the CPU's
/// time-stamp counter on x86-64 (an instruction, about 20 cycles; on an
/// emulated guest whose kernel reads HPET, CLOCK_MONOTONIC costs 1.7 us),
/// CLOCK_MONOTONIC in nanoseconds elsewhere. Read once per turn of an
/// event listener's loop, never per operation.

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cordma::detail {

struct tick_clock {
    static std::uint64_t now() noexcept {
#if defined(__x86_64__)
        return __rdtsc();
#else
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
#endif
    }
    /// Nanoseconds a tick lasts: the counter measured against
    /// CLOCK_MONOTONIC from the library's load to the first call (waiting
    /// until 50 ms have passed, if asked sooner), then kept. Any thread.
    static double ns_per_tick() noexcept;
};

}  // namespace cordma::detail
