// builder::connect over the TCP endpoint exchange: a TCP connect (retried
// while the peer refuses, until the connect deadline), then the client's
// half of the handshake (tcp_handshake.hpp). Threads and lifetimes: see
// tcp_io.hpp.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include <asio/error.hpp>
#include <asio/ip/tcp.hpp>

#include "connect/connect.hpp"
#include "connect/connect_backoff.hpp"
#include "connect/tcp/tcp_channel.hpp"
#include "connect/tcp/tcp_handshake.hpp"
#include "connect/tcp/tcp_io.hpp"
#include "connect/tcp/tcp_service.hpp"
#include "engine/connection_state.hpp"
#include "engine/delay.hpp"

namespace cordma::detail {

using asio::ip::tcp;

task<connection> connect_tcp(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where,
                             ready_hook hook) {
    std::string peer = where.to_string();
    std::string who = "connect to " + peer;
    co_await rt->event_listener->schedule();
    tcp_service& service = tcp_service::of(*rt);
    auto deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
    bool refused_before = false;  // the last definite answer was a refusal
    std::exception_ptr backlog_full;  // the last refusal by a full backlog, if any
    for (connect_backoff backoff;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        auto io = std::make_shared<tcp_io>(service.context());
        auto channel = tcp_channel::make(rt, io, peer);
        start_deadline(service, io, std::max(left, std::chrono::milliseconds(1)));
        io_result connected = co_await on_io(
            service, *rt->event_listener, io, [endpoint = to_endpoint(where)](const std::shared_ptr<tcp_io>& io, io_done done) {
                io->socket.async_connect(endpoint, [io, done = std::move(done)](const asio::error_code& ec) {
                    if (!ec) {
                        asio::error_code ignored;
                        io->socket.set_option(tcp::no_delay(true), ignored);
                        io->local = address_of(io->socket.local_endpoint(ignored));
                    }
                    done(ec);
                });
            });
        bool refused = !connected.timed_out && connected.ec == asio::error::connection_refused;
        // Nothing listening yet (a server started with its client): try
        // again until the connect deadline. A deadline that runs out during
        // a retry after a refusal reports the refusal, as over rdma_cm.
        if (refused && std::chrono::steady_clock::now() + backoff.step() < deadline) {
            refused_before = true;
            co_await after(*rt->event_listener, backoff.next());
            continue;
        }
        if (connected.timed_out && backlog_full)
            std::rethrow_exception(backlog_full);
        if (refused || (connected.timed_out && refused_before)) {
            throw handshake_error(std::make_error_code(std::errc::connection_refused),
                                  who + ": connection refused until builder::connect_timeout ran out (nothing "
                                        "listens on that TCP port; does the peer's builder use "
                                        "endpoint_exchange::tcp?)");
        }
        check(connected, who, settings.connect_timeout, "connecting over TCP");
        std::optional<connection> conn;
        try {
            conn = co_await exchange_endpoints(rt, settings, std::move(channel), peer, who, true, hook);
        } catch (const handshake_error& e) {
            // The listener's backlog is full: try again (jittered, so a
            // storm's refused clients come back spread out) until the
            // deadline, then say so.
            if (e.code() != std::errc::connection_refused)
                throw;
            backlog_full = std::current_exception();
            if (std::chrono::steady_clock::now() + backoff.step() >= deadline)
                std::rethrow_exception(backlog_full);
        }
        if (!conn) {
            co_await after(*rt->event_listener, backoff.next());
            continue;
        }
        connection_access::state(*conn)->reopen = [rt, settings, where] { return connect_tcp(rt, settings, where); };
        co_return std::move(*conn);
    }
}

}  // namespace cordma::detail
