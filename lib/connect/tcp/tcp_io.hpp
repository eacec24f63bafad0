#pragma once
/// The exchange socket (tcp_io) and the bridge that lets a handshake
/// coroutine on the event listener thread run one Asio operation at a time
/// on the io thread (on_io); with the address helpers, the handshake deadline
/// and the handshake's errors. The wire format is in endpoint_message.hpp.
///
/// endpoint_exchange::tcp: QP endpoints exchanged over a TCP socket (Asio),
/// which then stays open as the connection's liveness channel. Its parts:
/// tcp_service.hpp (the io thread), this header, tcp_channel.hpp (the
/// transport), tcp_handshake.hpp (both sides' half of the handshake),
/// tcp_acceptor.hpp (listen_tcp) and tcp_connect.cpp (connect_tcp).
///
/// Threads. Asio runs on one io_context thread per runtime (tcp_service); the
/// handshakes are coroutines on the event listener thread, like the rdma_cm
/// ones. Each socket operation is posted to the io thread and its completion
/// posted back to the event listener thread (on_io), so neither thread ever blocks
/// on the other.
///
/// Lifetimes. The io thread never outlives its runtime (the runtime's
/// destructor stops and joins it), and the runtime keeps the event listener
/// alive, so io handlers may use a raw event_listener*. Io handlers hold only
/// io-side objects (tcp_io, accept_io: sockets, timers, buffers), never the
/// runtime, so a pending read cannot keep a runtime alive forever. The
/// listener-side objects (tcp_channel, tcp_acceptor) hold the runtime, are
/// reached from the io thread only through weak_ptrs locked on the listener
/// thread, and are destroyed there (make() gives them a deleter that posts),
/// so no callback ever finds one freed. What crosses from the io thread to
/// the event listener thread is results and, for an accepted client, a plain file
/// descriptor: nothing whose destruction needs the io_context.

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <cordma/address.hpp>
#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>

#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/rail_message.hpp"
#include "connect/tcp/tcp_service.hpp"

namespace cordma::detail {

/// One exchange socket and what its operations need to stay alive. Made on
/// the event listener thread; after that touched only on the io thread (or, from
/// the event listener thread, between operations the io thread has finished).
struct tcp_io {
    explicit tcp_io(asio::io_context& context) : socket(context), timer(context) {}
    tcp_io(asio::io_context& context, const asio::ip::tcp& protocol, int fd)
        : socket(context, protocol, fd), timer(context) {}

    /// Io thread. Fails whatever is pending on the socket; idempotent.
    void close() noexcept;

    asio::ip::tcp::socket socket;
    // The handshake deadline: closes the socket when it fires.
    asio::steady_timer timer;
    // The local address, for the GID (qp_options picks the one it maps to).
    socket_address local{};
    bool timed_out = false;
    // The handshake succeeded: the deadline no longer applies.
    bool settled = false;
    std::array<std::uint8_t, endpoint_message_size> sent{};
    std::array<std::uint8_t, endpoint_message_size> received{};
    // Plain connections (builder::agent(false)): the private data each way.
    std::vector<std::byte> private_sent;
    std::vector<std::byte> private_received;
    std::uint8_t ready_sent = ready_byte;
    std::uint8_t ready_received = 0;
    // After "ready" (rails only, rail_message.hpp): the message being read,
    // and those waiting to be written, the first being written (a list:
    // nothing allocated until a message goes, and the one being written
    // stays put while others are added).
    std::array<std::uint8_t, rail_message_size> inbox{};
    std::list<std::array<std::uint8_t, rail_message_size>> outbox;
    bool writing = false;
};

socket_address address_of(const asio::ip::tcp::endpoint& endpoint);
asio::ip::tcp::endpoint to_endpoint(const socket_address& address);
std::string endpoint_string(const asio::ip::tcp::endpoint& endpoint);

/// "10", "1.5", "0.25": for "timed out after N s".
std::string seconds(std::chrono::milliseconds limit);

/// Starts the handshake deadline: when it passes, the socket is closed, which
/// fails the pending step; its result then says timed_out.
void start_deadline(tcp_service& service, std::shared_ptr<tcp_io> io, std::chrono::milliseconds limit);

// --------------------------------------------- from the io thread and back

struct io_result {
    asio::error_code ec;
    std::size_t bytes = 0;
    bool timed_out = false;
};

struct io_wait {
    std::coroutine_handle<> handle;
    io_result result;
    // The awaiting frame went away: do not resume it.
    std::atomic<bool> abandoned{false};
};

/// The completion handler on_io gives an Asio operation: records the result
/// on the io thread and resumes the coroutine on the event listener thread.
struct io_done {
    event_listener* el;
    std::shared_ptr<tcp_io> io;
    std::shared_ptr<io_wait> wait;

    void operator()(const asio::error_code& ec, std::size_t bytes = 0) const;
};

/// `co_await on_io(...)` runs `start(io, done)` on the io thread, where it
/// starts one Asio operation with `done` as its handler, and resumes on the
/// event listener thread with the operation's io_result. `io` stays alive (with
/// its buffers) until the operation completes.
template <class Start>
struct [[nodiscard]] io_awaiter {
    tcp_service* service;
    event_listener* el;
    std::shared_ptr<tcp_io> io;
    Start start;
    std::shared_ptr<io_wait> wait = std::make_shared<io_wait>();

    io_awaiter(tcp_service* s, event_listener* l, std::shared_ptr<tcp_io> i, Start st)
        : service(s), el(l), io(std::move(i)), start(std::move(st)) {}
    io_awaiter(const io_awaiter&) = delete;
    io_awaiter& operator=(const io_awaiter&) = delete;
    ~io_awaiter() { wait->abandoned.store(true, std::memory_order_release); }

    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        wait->handle = h;
        // The completion is posted back, so it never resumes h before this
        // returns (we are on the event listener thread ourselves).
        asio::post(service->context(), [start = std::move(start), done = io_done{el, io, wait}]() mutable {
            auto io = done.io;
            start(io, std::move(done));
        });
    }
    io_result await_resume() const noexcept { return wait->result; }
};

template <class Start>
io_awaiter<Start> on_io(tcp_service& service, event_listener& el, std::shared_ptr<tcp_io> io, Start start) {
    return io_awaiter<Start>(&service, &el, std::move(io), std::move(start));
}

/// A handshake failure caused by the peer or the network (as opposed to a
/// local verbs error): a listener drops that client and goes on accepting.
/// Users catch it by its public name, cordma::connect_error.
using handshake_error = connect_error;

/// Throws handshake_error if `result` failed `step` (timed out, EOF, error).
/// `who` is "connect to 10.0.0.2:7471" or "accept from 10.0.0.3:51234".
void check(const io_result& result, const std::string& who, std::chrono::milliseconds limit, const char* step);

}  // namespace cordma::detail
