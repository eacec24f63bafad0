#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): setting connections up, a
/// listener's accept and a builder's connect, as Asio asynchronous
/// operations.

#include <stop_token>
#include <string>

#include <asio/cancellation_type.hpp>

#include <cordma/asio/async_cordma.hpp>
#include <cordma/builder.hpp>
#include <cordma/listener.hpp>

namespace cordma {

// ---- Setting up connections -----------------------------------------------

/// listener::accept: the next client, handshake done.
/// Completion: void(std::error_code, connection). Cancellable: the listener
/// goes on listening, and a client mid-handshake is left to the next
/// accept. std::errc::not_connected once the listener is closed.
template <class CompletionToken>
auto async_accept(listener l, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [l](std::stop_token stop) mutable { return l.accept(std::move(stop)); });
}

/// builder::connect: connects to a listener at `address` ("host:port").
/// Completion: void(std::error_code, connection). The address is parsed
/// and resolved (a blocking name lookup for a host name) and the device
/// opened inside the initiating call, on the calling thread; their errors
/// still go to the handler. Not cancellable (builder::connect takes no stop
/// token): it ends within builder::connect_timeout, with
/// std::errc::timed_out or std::errc::connection_refused. Under `||` with a
/// timer, the `||` completes only when the connect does.
template <class CompletionToken>
auto async_connect(builder b, std::string address, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [b, address](std::stop_token) mutable { return b.connect(address); }, {}, asio::cancellation_type::none);
}

}  // namespace cordma
