#include "connect/connect_backoff.hpp"

#include <algorithm>
#include <random>

namespace cordma::detail {

namespace {
std::mt19937_64& generator() {
    static thread_local std::mt19937_64 g{std::random_device{}()};
    return g;
}
}  // namespace

std::chrono::milliseconds connect_backoff::next() {
    std::uniform_int_distribution<std::int64_t> pick(step_.count() / 2, step_.count());
    std::chrono::milliseconds wait(pick(generator()));
    step_ = std::min(step_ * 2, std::chrono::milliseconds(200));
    return wait;
}

std::uint64_t random_token() { return generator()() | 1; }

}  // namespace cordma::detail
