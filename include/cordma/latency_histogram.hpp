#pragma once
/// \file
/// A latency distribution in fixed memory: log-linear buckets (as HDR
/// histograms have), each power of two split into 16, so every value is
/// known within 1/16 (6.25%) of itself and the whole range, a tick to
/// hundreds of seconds, fits in 608 counts (4.8 KiB). What metrics.hpp's
/// snapshots carry per operation kind and the rpc module per method.
///
/// ```
/// const cordma::latency_histogram& h = builder.metrics().latency_of(cordma::operation_kind::write);
/// std::printf("%llu writes: p50 %.1f us, p99 %.1f us, max %.1f us\n",
///             (unsigned long long)h.count(), h.quantile_ns(0.5) / 1e3, h.quantile_ns(0.99) / 1e3,
///             h.max_ns() / 1e3);
/// ```
///
/// Values are recorded in ticks of a clock (cordma's: the CPU's time-stamp
/// counter where there is one, read once per turn of an event listener's
/// loop) and read in nanoseconds through ns_per_tick. One may record one's
/// own, in nanoseconds, with ns_per_tick left at 1.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <cordma/export.hpp>

namespace cordma {

/// A distribution of durations in fixed memory (see the top): counts by
/// log-linear bucket, their sum and their maximum, and how long a tick
/// lasts. A plain value: copy it, add readings, subtract an earlier one.
class CORDMA_API latency_histogram {
public:
    /// log2 of the buckets each power of two is split into (16).
    static constexpr unsigned sub_bucket_bits = 4;
    /// Values of 2^(max_exponent + 1) ticks and more share the last bucket
    /// (with a 3 GHz tick, from about 12 minutes on).
    static constexpr unsigned max_exponent = 40;
    /// How many buckets there are: values 0 to 31 one each, then 16 for
    /// each power of two up to 2^max_exponent.
    static constexpr std::size_t bucket_count = (max_exponent - sub_bucket_bits) * 16 + 32;

    /// The bucket `ticks` is counted in.
    static constexpr std::size_t bucket_of(std::uint64_t ticks) noexcept {
        if (ticks < 32)
            return static_cast<std::size_t>(ticks);
        unsigned exponent = 63u - static_cast<unsigned>(std::countl_zero(ticks));
        if (exponent > max_exponent)
            return bucket_count - 1;
        unsigned shift = exponent - sub_bucket_bits;
        return static_cast<std::size_t>(shift) * 16 + static_cast<std::size_t>(ticks >> shift);
    }
    /// The smallest value counted in bucket `index`.
    static constexpr std::uint64_t bucket_low(std::size_t index) noexcept {
        if (index < 32)
            return index;
        std::size_t shift = index / 16 - 1;
        return static_cast<std::uint64_t>(index % 16 + 16) << shift;
    }
    /// The largest value counted in bucket `index` (the last bucket's is
    /// the largest value there is).
    static constexpr std::uint64_t bucket_high(std::size_t index) noexcept {
        return index + 1 == bucket_count ? ~std::uint64_t{0} : bucket_low(index + 1) - 1;
    }

    /// Counts one value. Not thread-safe (one writer, as the engine's are).
    void record(std::uint64_t ticks) noexcept {
        ++counts[bucket_of(ticks)];
        sum_ticks += ticks;
        if (ticks > max_ticks)
            max_ticks = ticks;
    }

    /// Values counted.
    std::uint64_t count() const noexcept;
    /// The value under which a fraction `q` (0 to 1) of them lie: the
    /// highest value of the bucket holding the ceil(q * count())-th
    /// smallest, no more than max_ns(); so at most 1/16 above the true
    /// quantile, never below it. 0 when nothing was counted.
    double quantile_ns(double q) const noexcept;
    /// The largest value counted, in nanoseconds (0 when none).
    double max_ns() const noexcept { return static_cast<double>(max_ticks) * ns_per_tick; }
    /// Every value counted, summed, in nanoseconds.
    double sum_ns() const noexcept { return static_cast<double>(sum_ticks) * ns_per_tick; }
    /// The mean, in nanoseconds (0 when none).
    double mean_ns() const noexcept;

    /// Adds `other`'s values (same ticks: both cordma's, or both one's own).
    latency_histogram& operator+=(const latency_histogram& other) noexcept;
    /// Takes out the values of `earlier`, a reading of the same histogram
    /// before this one: what was counted between the two. The maximum
    /// becomes the largest value of the highest bucket left (within 1/16 of
    /// the true one), or this reading's if that is smaller.
    latency_histogram& operator-=(const latency_histogram& earlier) noexcept;

    /// Values counted, by bucket.
    std::array<std::uint64_t, bucket_count> counts{};
    /// Their sum, in ticks.
    std::uint64_t sum_ticks = 0;
    /// The largest, in ticks.
    std::uint64_t max_ticks = 0;
    /// Nanoseconds a tick lasts (cordma's clock measured once against
    /// CLOCK_MONOTONIC; 1 for values recorded in nanoseconds).
    double ns_per_tick = 1.0;
};

}  // namespace cordma
