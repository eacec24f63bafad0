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
// two clocks have usually run for seconds, and the ratio is exact to
// parts per million.
const anchor loaded;

// After 10 s the ratio is as good as it gets: kept, and no clock read
// more per snapshot.
std::atomic<double> settled{0};

}  // namespace

double tick_clock::ns_per_tick() noexcept {
#if defined(__x86_64__)
    if (double s = settled.load(std::memory_order_relaxed); s != 0)
        return s;
    std::uint64_t ns = monotonic_ns();
    while (ns - loaded.ns < 2'000'000)
        ns = monotonic_ns();
    std::uint64_t ticks = tick_clock::now();
    if (ticks <= loaded.ticks)
        return 1.0;  // no usable counter: never seen, but never divide by 0
    double ratio = static_cast<double>(ns - loaded.ns) / static_cast<double>(ticks - loaded.ticks);
    if (ns - loaded.ns >= 10'000'000'000u)
        settled.store(ratio, std::memory_order_relaxed);
    return ratio;
#else
    return 1.0;
#endif
}

}  // namespace cordma::detail
