// latency_histogram.hpp: reading a distribution (quantiles, sums,
// differences of two readings).
#include <cordma/latency_histogram.hpp>

#include <algorithm>
#include <cmath>

namespace cordma {

std::uint64_t latency_histogram::count() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t c : counts)
        n += c;
    return n;
}

double latency_histogram::quantile_ns(double q) const noexcept {
    std::uint64_t n = count();
    if (n == 0)
        return 0;
    q = std::clamp(q, 0.0, 1.0);
    auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(n))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
        seen += counts[i];
        if (seen >= rank)
            return static_cast<double>(std::min(bucket_high(i), max_ticks)) * ns_per_tick;
    }
    return max_ns();
}

double latency_histogram::mean_ns() const noexcept {
    std::uint64_t n = count();
    return n == 0 ? 0 : sum_ns() / static_cast<double>(n);
}

latency_histogram& latency_histogram::operator+=(const latency_histogram& other) noexcept {
    for (std::size_t i = 0; i < bucket_count; ++i)
        counts[i] += other.counts[i];
    sum_ticks += other.sum_ticks;
    max_ticks = std::max(max_ticks, other.max_ticks);
    return *this;
}

latency_histogram& latency_histogram::operator-=(const latency_histogram& earlier) noexcept {
    std::size_t top = bucket_count;
    for (std::size_t i = 0; i < bucket_count; ++i) {
        counts[i] -= std::min(counts[i], earlier.counts[i]);
        if (counts[i] != 0)
            top = i;
    }
    sum_ticks -= std::min(sum_ticks, earlier.sum_ticks);
    max_ticks = top == bucket_count ? 0 : std::min(max_ticks, bucket_high(top));
    return *this;
}

}  // namespace cordma
