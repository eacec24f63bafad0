#pragma once
/// How a client waits between connect attempts while a server refuses it
/// (nothing listening yet, or its backlog full), on every transport: waits
/// that double from 10 ms to 200 ms, each jittered, so that the clients of
/// a storm refused together come back spread out rather than together.

#include <chrono>
#include <cstdint>

namespace cordma::detail {

class connect_backoff {
public:
    /// The wait before the next attempt: between half of the current step
    /// and all of it. Doubles the step, up to 200 ms.
    std::chrono::milliseconds next();
    /// The current step, before jitter (to see whether one more attempt
    /// fits before a deadline).
    std::chrono::milliseconds step() const noexcept { return step_; }

private:
    std::chrono::milliseconds step_{10};
};

/// A random 64-bit value, odd (so never 0): the token pairing a connection's
/// agent control QP with its data QP. From the same per-thread generator as
/// the backoff's jitter.
std::uint64_t random_token();

}  // namespace cordma::detail
