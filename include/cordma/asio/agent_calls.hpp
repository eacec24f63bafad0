#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): connection's memory-region
/// agent calls (request, grant, hand back and revoke regions) as Asio
/// asynchronous operations.

#include <chrono>
#include <cstddef>
#include <stop_token>
#include <utility>

#include <asio/cancellation_type.hpp>

#include <cordma/access.hpp>
#include <cordma/agent_call.hpp>
#include <cordma/asio/async_cordma.hpp>
#include <cordma/connection.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/remote_mr.hpp>

namespace cordma {

namespace detail {

/// An agent call as an Asio operation: `call_with(agent_call)` makes the
/// cordma task. The call gets the operation's stop token (which the slot
/// stops), and the caller's own agent_call::stop stops the operation too.
template <class CompletionToken, class CallWith>
auto async_agent_call(CompletionToken&& token, agent_call call, CallWith call_with) {
    std::stop_token also = call.stop;
    return async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [call, call_with = std::move(call_with)](std::stop_token stop) mutable {
            call.stop = std::move(stop);
            return call_with(call);
        },
        std::move(also));
}

}  // namespace detail

// ---- Agent calls --------------------------------------------------------------
// Each is connection's agent call of the same name. The short forms use the
// call's defaults; the long ones take its arguments. Every one that waits
// has the call's deadline (agent_call::timeout, else builder::agent_timeout):
// past it, the handler gets std::errc::timed_out. Cancelled through the
// slot, or through agent_call::stop, it completes with
// asio::error::operation_aborted, and the connection stays up (a late grant
// is released, a late region goes to the next receive).

/// connection::request_remote_mr: asks the peer's agent for `size` bytes.
/// Completion: void(std::error_code, remote_mr); a refusal by the peer (over
/// one of its agent_limits) is a std::system_error's code as the call
/// throws it.
template <class CompletionToken>
auto async_request_remote_mr(connection conn, std::size_t size, std::size_t alignment,
                             std::chrono::milliseconds lease, access_flags access, agent_call call,
                             CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, size, alignment, lease, access](agent_call c) mutable {
                                        return conn.request_remote_mr(size, alignment, lease, access, c);
                                    });
}

/// request_remote_mr with the defaults: 64-byte alignment, the peer's
/// default lease, remote read and write.
/// Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_request_remote_mr(connection conn, std::size_t size, CompletionToken&& token) {
    return async_request_remote_mr(std::move(conn), size, 64, std::chrono::milliseconds{},
                                   access_flags::remote_read | access_flags::remote_write, agent_call{},
                                   std::forward<CompletionToken>(token));
}

/// connection::send_local_mr: grants the peer `access` on `region` for
/// `lease`; `region` stays alive until the grant ends.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_local_mr(connection conn, local_slice region, std::chrono::milliseconds lease, access_flags access,
                         agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, region, lease, access](agent_call c) mutable {
                                        return conn.send_local_mr(region, lease, access, c);
                                    });
}

/// send_local_mr with the defaults: this side's default lease, remote read
/// and write. Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_local_mr(connection conn, local_slice region, CompletionToken&& token) {
    return async_send_local_mr(std::move(conn), std::move(region), std::chrono::milliseconds{},
                               access_flags::remote_read | access_flags::remote_write, agent_call{},
                               std::forward<CompletionToken>(token));
}

/// connection::receive_remote_mr: the next region the peer granted with
/// send_local_mr. Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_receive_remote_mr(connection conn, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn](agent_call c) mutable { return conn.receive_remote_mr(c); });
}

/// receive_remote_mr with the builder's agent_timeout.
/// Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_receive_remote_mr(connection conn, CompletionToken&& token) {
    return async_receive_remote_mr(std::move(conn), agent_call{}, std::forward<CompletionToken>(token));
}

/// connection::send_remote_mr: hands a region the peer owns back to it.
/// `region` is moved into the operation. Completion: void(std::error_code);
/// a region whose grant already ended gives std::errc::timed_out.
template <class CompletionToken>
auto async_send_remote_mr(connection conn, remote_mr region, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, region = std::move(region)](agent_call c) mutable {
                                        return conn.send_remote_mr(std::move(region), c);
                                    });
}

/// send_remote_mr with the builder's agent_timeout.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_remote_mr(connection conn, remote_mr region, CompletionToken&& token) {
    return async_send_remote_mr(std::move(conn), std::move(region), agent_call{},
                                std::forward<CompletionToken>(token));
}

/// connection::receive_local_mr: the next of this side's regions the peer
/// handed back. Completion: void(std::error_code, local_mr).
template <class CompletionToken>
auto async_receive_local_mr(connection conn, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn](agent_call c) mutable { return conn.receive_local_mr(c); });
}

/// receive_local_mr with the builder's agent_timeout.
/// Completion: void(std::error_code, local_mr).
template <class CompletionToken>
auto async_receive_local_mr(connection conn, CompletionToken&& token) {
    return async_receive_local_mr(std::move(conn), agent_call{}, std::forward<CompletionToken>(token));
}

/// connection::revoke_local_mr: ends every grant overlapping `region` now.
/// Completion: void(std::error_code, std::size_t grants_ended). Not
/// cancellable.
template <class CompletionToken>
auto async_revoke_local_mr(connection conn, local_slice region, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, region](std::stop_token) mutable { return conn.revoke_local_mr(region); }, {},
        asio::cancellation_type::none);
}

}  // namespace cordma
