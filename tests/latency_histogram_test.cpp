// latency_histogram.hpp, pure logic: every value lands in a bucket that
// holds it and is at most 1/16 wide relative to it, the buckets tile the
// range with no gap, quantiles are never below the true ones and at most
// 1/16 above, and sums and differences of readings are what recording
// the values together (or only the later ones) gives.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/latency_histogram.hpp>

using cordma::latency_histogram;

namespace {

// The exact q-quantile as the histogram defines it: the ceil(q * n)-th
// smallest value.
std::uint64_t exact_quantile(std::vector<std::uint64_t> v, double q) {
    std::sort(v.begin(), v.end());
    auto rank = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))));
    return v[rank - 1];
}

}  // namespace

TEST_CASE("buckets tile the range, each holding its values within 1/16", "[latency]") {
    CHECK(latency_histogram::bucket_low(0) == 0);
    for (std::size_t i = 0; i + 1 < latency_histogram::bucket_count; ++i) {
        INFO("bucket " << i);
        REQUIRE(latency_histogram::bucket_low(i + 1) == latency_histogram::bucket_high(i) + 1);
        std::uint64_t low = latency_histogram::bucket_low(i), high = latency_histogram::bucket_high(i);
        REQUIRE(high - low <= std::max<std::uint64_t>(0, low / 16));
        REQUIRE(latency_histogram::bucket_of(low) == i);
        REQUIRE(latency_histogram::bucket_of(high) == i);
    }
    CHECK(latency_histogram::bucket_high(latency_histogram::bucket_count - 1) == ~std::uint64_t{0});
    CHECK(latency_histogram::bucket_of(~std::uint64_t{0}) == latency_histogram::bucket_count - 1);
    CHECK(latency_histogram::bucket_of(std::uint64_t{1} << 41) == latency_histogram::bucket_count - 1);
    CHECK(latency_histogram::bucket_of((std::uint64_t{1} << 41) - 1) == latency_histogram::bucket_count - 1);
    std::mt19937_64 random(7);
    for (int i = 0; i < 100000; ++i) {
        std::uint64_t v = random() >> (random() % 64);
        std::size_t b = latency_histogram::bucket_of(v);
        REQUIRE(latency_histogram::bucket_low(b) <= v);
        REQUIRE(v <= latency_histogram::bucket_high(b));
    }
}

TEST_CASE("quantiles are never below the true ones and at most 1/16 above", "[latency]") {
    std::mt19937_64 random(11);
    // Log-normal-ish latencies: 200 ns to tens of milliseconds.
    std::lognormal_distribution<double> spread(10.0, 1.5);
    std::vector<std::uint64_t> values;
    latency_histogram h;
    h.ns_per_tick = 1.0;
    for (int i = 0; i < 20000; ++i) {
        auto v = static_cast<std::uint64_t>(spread(random));
        values.push_back(v);
        h.record(v);
    }
    REQUIRE(h.count() == values.size());
    for (double q : {0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0}) {
        INFO("q " << q);
        double exact = static_cast<double>(exact_quantile(values, q));
        double got = h.quantile_ns(q);
        CHECK(got >= exact);
        CHECK(got <= exact + std::max(0.0, std::floor(exact / 16)));
    }
    CHECK(h.max_ns() == static_cast<double>(*std::max_element(values.begin(), values.end())));
    CHECK(h.quantile_ns(1.0) == h.max_ns());
    double sum = 0;
    for (std::uint64_t v : values)
        sum += static_cast<double>(v);
    CHECK(h.sum_ns() == Approx(sum));
    CHECK(h.mean_ns() == Approx(sum / static_cast<double>(values.size())));

    // Ticks of another length: the same figures, scaled.
    latency_histogram scaled = h;
    scaled.ns_per_tick = 0.25;
    CHECK(scaled.quantile_ns(0.99) == Approx(h.quantile_ns(0.99) * 0.25));
    CHECK(scaled.max_ns() == Approx(h.max_ns() * 0.25));
}

TEST_CASE("an empty histogram reads as zeros", "[latency]") {
    latency_histogram h;
    CHECK(h.count() == 0);
    CHECK(h.quantile_ns(0.5) == 0);
    CHECK(h.max_ns() == 0);
    CHECK(h.mean_ns() == 0);
}

TEST_CASE("readings add up, and a difference of two is what came between", "[latency]") {
    std::mt19937_64 random(3);
    latency_histogram first, second, both, later_only;
    for (int i = 0; i < 5000; ++i) {
        std::uint64_t v = random() % 1'000'000;
        first.record(v);
        both.record(v);
    }
    latency_histogram earlier = both;  // a reading taken here
    for (int i = 0; i < 3000; ++i) {
        std::uint64_t v = random() % 50'000;  // smaller: the maximum must come down
        second.record(v);
        both.record(v);
        later_only.record(v);
    }
    latency_histogram sum = first;
    sum += second;
    CHECK(sum.counts == both.counts);
    CHECK(sum.sum_ticks == both.sum_ticks);
    CHECK(sum.max_ticks == both.max_ticks);

    latency_histogram between = both;
    between -= earlier;
    CHECK(between.counts == later_only.counts);
    CHECK(between.sum_ticks == later_only.sum_ticks);
    CHECK(between.count() == 3000);
    // The maximum since: within its bucket, never below the true one.
    CHECK(between.max_ticks >= later_only.max_ticks);
    CHECK(between.max_ticks <= latency_histogram::bucket_high(latency_histogram::bucket_of(later_only.max_ticks)));
    CHECK(between.quantile_ns(0.5) == later_only.quantile_ns(0.5));

    latency_histogram nothing = both;
    nothing -= both;
    CHECK(nothing.count() == 0);
    CHECK(nothing.max_ticks == 0);
    CHECK(nothing.sum_ticks == 0);
}
