#include "connect/tcp/tcp_handshake.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <stdexcept>
#include <system_error>

#include <asio/buffer.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "connect/assemble.hpp"
#include "connect/backlog_refusal.hpp"
#include "connect/qp_settings.hpp"
#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/rail_rejoin.hpp"
#include "connect/tcp/tcp_channel.hpp"
#include "connect/tcp/tcp_io.hpp"
#include "engine/connection_state.hpp"
#include "engine/shared_receive_state.hpp"

namespace cordma::detail {

namespace {

/// Sends our ready byte and reads the peer's; a ready peer settles the
/// socket's deadline (it becomes the connection's liveness channel).
task<void> say_ready(tcp_service& service, event_listener& el, std::shared_ptr<tcp_io> io, std::string who,
                     std::chrono::milliseconds limit) {
    check(co_await on_io(service, el, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_write(io->socket, asio::buffer(&io->ready_sent, 1), std::move(done));
                         }),
          who, limit, "telling the peer we are ready");
    check(co_await on_io(service, el, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_read(io->socket, asio::buffer(&io->ready_received, 1),
                                              [io, done = std::move(done)](const asio::error_code& ec, std::size_t n) {
                                                  // Decided here, on the io thread, so the
                                                  // deadline cannot close a socket that
                                                  // has just become the liveness channel.
                                                  if (!ec && !io->timed_out) {
                                                      io->settled = true;
                                                      try {
                                                          io->timer.cancel();
                                                      } catch (const std::exception&) {
                                                      }
                                                  }
                                                  done(ec, n);
                                              });
                         }),
          who, limit, "waiting for the peer to be ready");
    if (io->ready_received != ready_byte)
        throw handshake_error(make_error_code(errc::protocol_violation),
                              who + ": malformed ready message from the peer: byte is " +
                                  std::to_string(io->ready_received) + ", expected " + std::to_string(ready_byte) +
                                  " ('R')");
}

/// Rail `rail`'s QP, made on its device, its endpoint sent and the
/// peer's read over the socket, and connected (RTS).
task<std::shared_ptr<queue_pair>> exchange_rail(runtime& rt, const connection_settings& settings,
                                                tcp_service& service, event_listener& el, std::shared_ptr<tcp_io> io,
                                                std::size_t rail, const std::string& who,
                                                std::chrono::milliseconds limit) {
    const auto& device = rt.rail_device(rail);
    rail_qp made = make_rail_qp(rt, settings, rail);
    io->sent = encode_endpoint_message(made.ours);
    std::string step = "rail " + std::to_string(rail) + " (" + device->name() + ")";
    check(co_await on_io(service, el, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_write(io->socket, asio::buffer(io->sent), std::move(done));
                         }),
          who, limit, ("sending our endpoint on " + step).c_str());
    check(co_await on_io(service, el, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_read(io->socket, asio::buffer(io->received), std::move(done));
                         }),
          who, limit, ("waiting for the peer's endpoint on " + step).c_str());
    endpoint_message remote;
    try {
        remote = decode_endpoint_message(io->received);
    } catch (const std::invalid_argument& e) {
        throw handshake_error(make_error_code(errc::protocol_violation),
                              who + ": malformed endpoint message from the peer for " + step + ": " + e.what());
    }
    made.options.mtu = std::min(made.ours.mtu, remote.mtu);
    made.qp->connect(remote.endpoint, made.options);
    co_return std::move(made.qp);
}

}  // namespace

task<connection> exchange_endpoints(std::shared_ptr<runtime> rt, connection_settings settings,
                                    std::shared_ptr<tcp_channel> channel, std::string peer, std::string who,
                                    bool connecting, ready_hook hook, std::function<bool()> abandoned) {
    tcp_service& service = channel->service();
    event_listener& el = *rt->event_listener;
    std::shared_ptr<tcp_io> io = channel->io();
    const auto& device = el.device();
    std::chrono::milliseconds limit = settings.connect_timeout;

    qp_connect_options options = qp_options(settings, *device, io->local.get(), 0, qp_role::data);
    qp_connect_options control_options = qp_options(settings, *device, io->local.get(), 0, qp_role::control);
    auto qp = rt->create_qp(settings.capacity, settings.shared_receives);
    ibv_mtu mtu = std::min(options.mtu, device->query_port(options.port).active_mtu);
    endpoint_message ours{qp->local_endpoint(options.port, options.gid_index), mtu};
    ours.rails = static_cast<std::uint8_t>(rt->rail_count());
    if (!settings.with_agent) {
        ours.agent = false;
        ours.private_data_length = static_cast<std::uint16_t>(settings.private_data.size());
        io->private_sent = settings.private_data;
    }
    io->sent = encode_endpoint_message(ours);

    auto send_ours = [&]() -> task<void> {
        check(co_await on_io(service, el, io,
                             [](const std::shared_ptr<tcp_io>& io, io_done done) {
                                 // Without an agent the private data follows the message at once.
                                 std::array<asio::const_buffer, 2> buffers{asio::buffer(io->sent),
                                                                           asio::buffer(io->private_sent)};
                                 asio::async_write(io->socket, buffers, std::move(done));
                             }),
              who, limit, "sending our endpoint");
    };
    // The listener sends first; the client reads the listener's message
    // (or its refusal) before it sends anything, so a refusal's close never
    // meets unread bytes (which would reset the socket and lose it).
    if (!connecting)
        co_await send_ours();
    check(co_await on_io(service, el, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_read(io->socket, asio::buffer(io->received), std::move(done));
                         }),
          who, limit, "waiting for the peer's endpoint");
    if (auto refusal = endpoint_refusal_of(io->received)) {
        if (refusal->reason == endpoint_refusal::backlog_full)
            throw backlog_full_error(who, refusal->backlog);
        throw handshake_error(std::make_error_code(std::errc::connection_refused),
                              who + ": refused: the listener gave reason " + std::to_string(refusal->reason) +
                                  ", unknown to this side");
    }
    if (connecting)
        co_await send_ours();
    endpoint_message remote;
    try {
        remote = decode_endpoint_message(io->received);
    } catch (const std::invalid_argument& e) {
        throw handshake_error(make_error_code(errc::protocol_violation),
                              who + ": malformed endpoint message from the peer: " + e.what());
    }
    // Both ends must agree on the agent; each side finds a mismatch in the
    // other's first message, so both fail with the reason.
    if (remote.agent != settings.with_agent)
        throw handshake_error(std::make_error_code(std::errc::protocol_not_supported),
                              who + ": " +
                                  (settings.with_agent
                                       ? "the peer has builder::agent(false) (plain connections only) and this side "
                                         "has the agent on; use builder::agent(false) on both sides, or the agent "
                                         "on both"
                                       : "the peer has the agent on and this side has builder::agent(false); use "
                                         "builder::agent(false) on both sides, or the agent on both"));

    // Rails are paired by position, so both ends need as many; each finds
    // a mismatch in the other's first message.
    if (remote.rails != rt->rail_count())
        throw handshake_error(std::make_error_code(std::errc::protocol_not_supported),
                              who + ": the peer has " + std::to_string(remote.rails) + " rail(s) and this side " +
                                  std::to_string(rt->rail_count()) +
                                  " (builder::rails); give both sides as many rails");

    std::shared_ptr<queue_pair> control_qp;
    if (settings.with_agent) {
        // The agent's control QP: a second endpoint over the same socket,
        // same format, so user traffic and agent traffic never share a
        // receive queue.
        control_qp = rt->create_qp(control_capacity);
        io->sent = encode_endpoint_message({control_qp->local_endpoint(options.port, options.gid_index), mtu});
        check(co_await on_io(service, el, io,
                             [](const std::shared_ptr<tcp_io>& io, io_done done) {
                                 asio::async_write(io->socket, asio::buffer(io->sent), std::move(done));
                             }),
              who, limit, "sending our agent endpoint");
        check(co_await on_io(service, el, io,
                             [](const std::shared_ptr<tcp_io>& io, io_done done) {
                                 asio::async_read(io->socket, asio::buffer(io->received), std::move(done));
                             }),
              who, limit, "waiting for the peer's agent endpoint");
        endpoint_message remote_control;
        try {
            remote_control = decode_endpoint_message(io->received);
        } catch (const std::invalid_argument& e) {
            throw handshake_error(make_error_code(errc::protocol_violation),
                                  who + ": malformed agent endpoint message from the peer: " + e.what());
        }
        control_options.mtu = std::min(mtu, remote_control.mtu);
        control_qp->connect(remote_control.endpoint, control_options);
    } else {
        io->private_received.resize(remote.private_data_length);
        check(co_await on_io(service, el, io,
                             [](const std::shared_ptr<tcp_io>& io, io_done done) {
                                 asio::async_read(io->socket, asio::buffer(io->private_received), std::move(done));
                             }),
              who, limit, "waiting for the peer's private data");
    }
    std::vector<std::shared_ptr<queue_pair>> rail_qps;
    for (std::size_t rail = 1; rail < rt->rail_count(); ++rail)
        rail_qps.push_back(co_await exchange_rail(*rt, settings, service, el, io, rail, who, limit));
    // A failed rail is admitted again over this socket (rail_rejoin.hpp).
    if (!rail_qps.empty())
        channel->enable_rails(settings, connecting);
    options.mtu = std::min(mtu, remote.mtu);
    qp->connect(remote.endpoint, options);

    auto make = [&](std::shared_ptr<tcp_channel> watcher) {
        return assemble([&] {
            auto parts = parts_for(*rt, settings, std::move(qp), peer, std::move(watcher), control_qp != nullptr);
            if (!control_qp)
                parts.peer_private_data = std::move(io->private_received);
            return parts;
        }());
    };
    if (abandoned && abandoned()) {
        asio::post(service.context(), [io] { io->close(); });
        co_return connection{};
    }
    if (!hook) {
        co_await say_ready(service, el, io, who, limit);
        connection conn = make(std::move(channel));
        if (control_qp)
            attach_control(conn, std::move(control_qp));
        if (!rail_qps.empty())
            attach_rails(conn, std::move(rail_qps), settings.stripe_threshold);
        co_return conn;
    }
    // With a hook, the connection is made before the ready byte goes (the
    // listener assembles, and may send, only once it has read it) and
    // watches its socket only after the exchange (the watch reads it).
    connection conn = make(nullptr);
    if (!rail_qps.empty())
        attach_rails(conn, std::move(rail_qps), settings.stripe_threshold);
    std::exception_ptr failure;
    try {
        hook(conn);
        co_await say_ready(service, el, io, who, limit);
    } catch (...) {
        failure = std::current_exception();
    }
    if (failure) {
        conn.shut_down();
        std::rethrow_exception(failure);
    }
    connection_access::state(conn)->set_transport(std::move(channel));
    co_return conn;
}

}  // namespace cordma::detail
