#pragma once
/// The clock of call deadlines (rpc calls, C API calls):
/// CLOCK_MONOTONIC_COARSE. Deadlines need milliseconds, and every call
/// reads the clock once: a precise read costs about a microsecond where the
/// clock source is slow (HPET in a VM: 1.16 us, measured by bench/rpc), a
/// coarse one a few nanoseconds anywhere.

#include <time.h>

#include <chrono>
#include <cstdint>

namespace cordma::detail {

/// CLOCK_MONOTONIC_COARSE as a std::chrono clock (see the top).
struct coarse_clock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<coarse_clock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept {
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
    /// now() in whole milliseconds: the stamp of a pending operation's
    /// age (stuck_report.hpp).
    static std::uint64_t now_ms() noexcept {
        return static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(now().time_since_epoch()).count());
    }
    /// How far behind the precise clock it may be: added to every deadline,
    /// so none passes early.
    static duration resolution() noexcept {
        static const duration r = [] {
            timespec ts{};
            clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
            return duration(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
        }();
        return r;
    }
};

}  // namespace cordma::detail
