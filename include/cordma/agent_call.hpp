#pragma once
/// \file
/// Per-call limits of the memory-region agent's calls
/// (connection::request_remote_mr and the rest): how long a call may wait,
/// and a way to stop it early.

#include <chrono>
#include <stop_token>

#include <cordma/export.hpp>

namespace cordma {

/// Limits of one agent call, given as its last argument
/// (`conn.request_remote_mr(size, align, lease, access, {.timeout = 5s})`).
/// The default waits for the connection's agent_timeout and cannot be
/// stopped early. Whatever ends the call early (its timeout, its stop
/// token), the connection stays up; what arrives afterwards is not lost
/// (a requested grant is released at once, a region sent later goes to the
/// next receive_remote_mr or receive_local_mr).
struct CORDMA_API agent_call {
    /// No deadline at all: the call waits until it is answered, stopped or
    /// the connection goes.
    static constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

    /// How long the call may wait, in all (for room to send, for the peer's
    /// answer, for a region to arrive). 0: the connection's default
    /// (builder::agent_timeout, 30 s). When it runs out the call throws
    /// timed_out_error naming the call, the peer and the limit; the
    /// connection stays up.
    std::chrono::milliseconds timeout{0};
    /// Stops the call early (from any thread): it throws operation_cancelled.
    std::stop_token stop{};
};

}  // namespace cordma
