// tick_clock.hpp: how long a tick lasts, measured.
#include "core/tick_clock.hpp"

#include <atomic>

namespace cordma::detail {

namespace {

std::uint64_t monotonic_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct anchor {
    std::uint64_t ns = monotonic_ns();
    std::uint64_t ticks = tick_clock::now();
};
// Taken when the library loads: by the time anyone reads a histogram the
// two clocks have usually run for seconds.
const anchor loaded;

// Measured once and kept: every reading converts alike (a page rendered
// twice is the same page), and no clock is read per snapshot.
std::atomic<double> settled{0};

}  // namespace

double tick_clock::ns_per_tick() noexcept {
#if defined(__x86_64__)
    if (double s = settled.load(std::memory_order_relaxed); s != 0)
        return s;
    // At least 50 ms after the load (waited for, once, if asked sooner): a
    // clock read's microsecond is then a few parts in 10^5 of the span.
    std::uint64_t ns = monotonic_ns();
    while (ns - loaded.ns < 50'000'000)
        ns = monotonic_ns();
    std::uint64_t ticks = tick_clock::now();
    double ratio = ticks <= loaded.ticks  // no usable counter: never seen, but never divide by 0
                       ? 1.0
                       : static_cast<double>(ns - loaded.ns) / static_cast<double>(ticks - loaded.ticks);
    // Racing threads may each measure: the first one's is kept for all.
    double expected = 0;
    settled.compare_exchange_strong(expected, ratio, std::memory_order_relaxed);
    return settled.load(std::memory_order_relaxed);
#else
    return 1.0;
#endif
}

}  // namespace cordma::detail
