// endpoint_exchange::tcp: QP endpoints exchanged over a TCP socket (Asio),
// which then stays open as the connection's liveness channel.
//
// Threads. Asio runs on one io_context thread per runtime (tcp_service); the
// handshakes are coroutines on the event listener thread, like the rdma_cm
// ones. Each socket operation is posted to the io thread and its completion
// posted back to the event listener thread (on_io), so neither thread ever blocks
// on the other.
//
// Lifetimes. The io thread never outlives its runtime (the runtime's
// destructor stops and joins it), and the runtime keeps the event listener
// alive, so io handlers may use a raw event_listener*. Io handlers hold only
// io-side objects (tcp_io, accept_io: sockets, timers, buffers), never the
// runtime, so a pending read cannot keep a runtime alive forever. The
// listener-side objects (tcp_channel, tcp_acceptor) hold the runtime, are
// reached from the io thread only through weak_ptrs locked on the listener
// thread, and are destroyed there (make() gives them a deleter that posts),
// so no callback ever finds one freed. What crosses from the io thread to
// the event listener thread is results and, for an accepted client, a plain file
// descriptor: nothing whose destruction needs the io_context.

#include "connect/assemble.hpp"
#include "engine/delay.hpp"
#include "engine/waiter_queue.hpp"
#include "connect/qp_settings.hpp"
#include "engine/listener_owned.hpp"
#include "connect/tcp/endpoint_message.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <system_error>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <cordma/address.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include "connect/acceptor.hpp"
#include "connect/connect.hpp"
#include "engine/connection_state.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

// ------------------------------------------------------------------ io thread

/// The io_context thread of one runtime. Made on first use, destroyed with
/// the runtime: stops the io_context and joins the thread; operations still
/// pending are dropped with the io_context (their handlers are destroyed, not
/// called).
class tcp_service {
public:
    tcp_service() : context_(std::make_shared<asio::io_context>()), work_(asio::make_work_guard(*context_)) {
        // The thread shares the io_context, so a (never expected) last
        // reference dropped on the io thread itself can detach safely.
        thread_ = std::thread([context = context_] {
            for (;;) {
                try {
                    context->run();
                    return;
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "cordma: TCP endpoint exchange: an io handler threw: %s\n", e.what());
                }
            }
        });
    }

    ~tcp_service() {
        work_.reset();
        context_->stop();
        if (thread_.get_id() == std::this_thread::get_id())
            thread_.detach();
        else
            thread_.join();
    }

    tcp_service(const tcp_service&) = delete;
    tcp_service& operator=(const tcp_service&) = delete;

    asio::io_context& context() noexcept { return *context_; }

    /// The runtime's service, started on first use. Any thread.
    static tcp_service& of(runtime& rt) {
        static std::mutex mutex;
        std::lock_guard lock(mutex);
        if (!rt.tcp)
            rt.tcp = std::make_shared<tcp_service>();
        return *rt.tcp;
    }

private:
    std::shared_ptr<asio::io_context> context_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

namespace {

using asio::ip::tcp;

/// One exchange socket and what its operations need to stay alive. Made on
/// the event listener thread; after that touched only on the io thread (or, from
/// the event listener thread, between operations the io thread has finished).
struct tcp_io {
    explicit tcp_io(asio::io_context& context) : socket(context), timer(context) {}
    tcp_io(asio::io_context& context, const tcp& protocol, int fd) : socket(context, protocol, fd), timer(context) {}

    /// Io thread. Fails whatever is pending on the socket; idempotent.
    void close() noexcept {
        asio::error_code ignored;
        try {
            timer.cancel();
        } catch (const std::exception&) {
        }
        socket.shutdown(tcp::socket::shutdown_both, ignored);
        socket.close(ignored);
    }

    tcp::socket socket;
    // The handshake deadline: closes the socket when it fires.
    asio::steady_timer timer;
    // The local address, for the GID (qp_options picks the one it maps to).
    socket_address local{};
    bool timed_out = false;
    // The handshake succeeded: the deadline no longer applies.
    bool settled = false;
    std::array<std::uint8_t, endpoint_message_size> sent{};
    std::array<std::uint8_t, endpoint_message_size> received{};
    std::uint8_t ready_sent = ready_byte;
    std::uint8_t ready_received = 0;
    std::uint8_t stray = 0;
};

socket_address address_of(const tcp::endpoint& endpoint) {
    socket_address address;
    std::memcpy(&address.storage, endpoint.data(), endpoint.size());
    address.length = static_cast<socklen_t>(endpoint.size());
    return address;
}

tcp::endpoint to_endpoint(const socket_address& address) {
    tcp::endpoint endpoint;
    std::memcpy(endpoint.data(), address.get(), address.length);
    endpoint.resize(address.length);
    return endpoint;
}

std::string endpoint_string(const tcp::endpoint& endpoint) {
    socket_address address;
    std::memcpy(&address.storage, endpoint.data(), endpoint.size());
    address.length = static_cast<socklen_t>(endpoint.size());
    return address.to_string();
}

/// "10", "1.5", "0.25": for "timed out after N s".
std::string seconds(std::chrono::milliseconds limit) {
    std::string text = std::to_string(limit.count() / 1000);
    if (auto ms = limit.count() % 1000; ms != 0) {
        char frac[8];
        std::snprintf(frac, sizeof frac, ".%03d", static_cast<int>(ms));
        std::string f = frac;
        while (f.back() == '0')
            f.pop_back();
        text += f;
    }
    return text;
}

/// Starts the handshake deadline: when it passes, the socket is closed, which
/// fails the pending step; its result then says timed_out.
void start_deadline(tcp_service& service, std::shared_ptr<tcp_io> io, std::chrono::milliseconds limit) {
    asio::post(service.context(), [io = std::move(io), limit] {
        io->timer.expires_after(limit);
        io->timer.async_wait([io](const asio::error_code& ec) {
            if (ec || io->settled)
                return;
            io->timed_out = true;
            io->close();
        });
    });
}

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
    event_listener* listener;
    std::shared_ptr<tcp_io> io;
    std::shared_ptr<io_wait> wait;

    void operator()(const asio::error_code& ec, std::size_t bytes = 0) const {
        wait->result = {ec, bytes, io->timed_out};
        listener->post([wait = wait] {
            if (!wait->abandoned.load(std::memory_order_acquire))
                wait->handle.resume();
        });
    }
};

/// `co_await on_io(...)` runs `start(io, done)` on the io thread, where it
/// starts one Asio operation with `done` as its handler, and resumes on the
/// event listener thread with the operation's io_result. `io` stays alive (with
/// its buffers) until the operation completes.
template <class Start>
struct [[nodiscard]] io_awaiter {
    tcp_service* service;
    event_listener* listener;
    std::shared_ptr<tcp_io> io;
    Start start;
    std::shared_ptr<io_wait> wait = std::make_shared<io_wait>();

    io_awaiter(tcp_service* s, event_listener* l, std::shared_ptr<tcp_io> i, Start st)
        : service(s), listener(l), io(std::move(i)), start(std::move(st)) {}
    io_awaiter(const io_awaiter&) = delete;
    io_awaiter& operator=(const io_awaiter&) = delete;
    ~io_awaiter() { wait->abandoned.store(true, std::memory_order_release); }

    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        wait->handle = h;
        // The completion is posted back, so it never resumes h before this
        // returns (we are on the event listener thread ourselves).
        asio::post(service->context(), [start = std::move(start), done = io_done{listener, io, wait}]() mutable {
            auto io = done.io;
            start(io, std::move(done));
        });
    }
    io_result await_resume() const noexcept { return wait->result; }
};

template <class Start>
io_awaiter<Start> on_io(tcp_service& service, event_listener& listener, std::shared_ptr<tcp_io> io, Start start) {
    return io_awaiter<Start>(&service, &listener, std::move(io), std::move(start));
}

/// A handshake failure caused by the peer or the network (as opposed to a
/// local verbs error): a listener drops that client and goes on accepting.
class handshake_error : public std::system_error {
public:
    handshake_error(std::error_code code, std::string message)
        : std::system_error(code), message_(std::move(message)) {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

/// `who` is "connect to 10.0.0.2:7471" or "accept from 10.0.0.3:51234".
void check(const io_result& result, const std::string& who, std::chrono::milliseconds limit, const char* step) {
    if (result.timed_out)
        throw handshake_error(std::make_error_code(std::errc::timed_out),
                              who + ": timed out after " + seconds(limit) + " s while " + step +
                                  " (builder::connect_timeout)");
    if (result.ec == asio::error::eof)
        throw handshake_error(std::make_error_code(std::errc::connection_aborted),
                              who + ": the peer closed the TCP connection while " + step +
                                  " (is it a cordma peer using endpoint_exchange::tcp?)");
    if (result.ec)
        throw handshake_error(result.ec, who + ": " + step + ": " + result.ec.message());
}

// ----------------------------------------------------------- the transport

/// The listener-side owner of one exchange socket: during the handshake the
/// socket; afterwards the connection's
/// transport, turning EOF on the socket into a shut-down connection.
/// Event listener thread; destroyed there.
class tcp_channel final : public transport, public std::enable_shared_from_this<tcp_channel> {
public:
    static std::shared_ptr<tcp_channel> make(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io,
                                             std::string peer) {
        auto listener = rt->event_listener;
        return owned_by_listener_thread(std::move(listener),
                                        new tcp_channel(std::move(rt), std::move(io), std::move(peer)));
    }

    ~tcp_channel() override {
        try {
            asio::post(service_->context(), [io = std::move(io_)] { io->close(); });
        } catch (const std::exception&) {
            // Out of memory: the socket closes when its last handler lets go.
        }
    }

    const std::shared_ptr<tcp_io>& io() const noexcept { return io_; }
    tcp_service& service() const noexcept { return *service_; }

    /// Shuts the socket down (the peer reads EOF) and returns once that is
    /// done. Sends nothing else.
    task<void> close() override {
        if (closing_)
            co_return;
        closing_ = true;
        co_await on_io(*service_, *rt_->event_listener, io_, [](const std::shared_ptr<tcp_io>& io, io_done done) {
            io->close();
            done({});
        });
    }

    /// Starts watching the socket: EOF or an error shuts the state down.
    void attach(std::weak_ptr<connection_state> state) override {
        state_ = std::move(state);
        asio::post(service_->context(),
                   [io = io_, listener = rt_->event_listener.get(), self = weak_from_this()] { watch(io, listener, self); });
    }

private:
    tcp_channel(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io, std::string peer)
        : rt_(std::move(rt)), service_(&tcp_service::of(*rt_)), io_(std::move(io)), peer_(std::move(peer)) {}

    /// Io thread. Keeps one read pending for as long as the socket is open.
    /// Nothing is sent after "ready"; a stray byte is ignored.
    static void watch(std::shared_ptr<tcp_io> io, event_listener* listener, std::weak_ptr<tcp_channel> self) {
        auto* raw = io.get();
        raw->socket.async_read_some(asio::buffer(&raw->stray, 1), [io = std::move(io), listener, self](
                                                                      const asio::error_code& ec, std::size_t) {
            if (!ec) {
                watch(io, listener, self);
                return;
            }
            listener->post([self] {
                if (auto channel = self.lock())
                    channel->peer_gone();
            });
        });
    }

    /// Event listener thread.
    void peer_gone() noexcept {
        if (closing_)
            return;  // our own close
        closing_ = true;
        if (auto state = state_.lock())
            state->shut_down("peer " + peer_ + " disconnected (TCP exchange socket closed)");
        try {
            asio::post(service_->context(), [io = io_] { io->close(); });
        } catch (const std::exception&) {
        }
    }

    std::shared_ptr<runtime> rt_;
    tcp_service* service_;
    std::shared_ptr<tcp_io> io_;
    std::string peer_;
    std::weak_ptr<connection_state> state_;
    bool closing_ = false;
};

// ---------------------------------------------------------- the handshake

/// Event listener thread, both sides, over a connected socket whose deadline is
/// running: create the QP, send our endpoint, read theirs, connect the QP,
/// then exchange "ready".
task<connection> exchange_endpoints(std::shared_ptr<runtime> rt, connection_settings settings,
                                    std::shared_ptr<tcp_channel> channel, std::string peer, std::string who) {
    tcp_service& service = channel->service();
    event_listener& listener = *rt->event_listener;
    std::shared_ptr<tcp_io> io = channel->io();
    const auto& device = listener.device();
    std::chrono::milliseconds limit = settings.connect_timeout;

    qp_connect_options options = qp_options(settings, *device, io->local.get(), 0, qp_role::data);
    qp_connect_options control_options = qp_options(settings, *device, io->local.get(), 0, qp_role::control);
    auto qp = rt->create_qp(settings.capacity);
    ibv_mtu mtu = std::min(options.mtu, device->query_port(options.port).active_mtu);
    io->sent = encode_endpoint_message({qp->local_endpoint(options.port, options.gid_index), mtu});

    check(co_await on_io(service, listener, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_write(io->socket, asio::buffer(io->sent), std::move(done));
                         }),
          who, limit, "sending our endpoint");
    check(co_await on_io(service, listener, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_read(io->socket, asio::buffer(io->received), std::move(done));
                         }),
          who, limit, "waiting for the peer's endpoint");
    endpoint_message remote;
    try {
        remote = decode_endpoint_message(io->received);
    } catch (const std::invalid_argument& e) {
        throw handshake_error(std::make_error_code(std::errc::protocol_error),
                              who + ": malformed endpoint message from the peer: " + e.what());
    }

    // The agent's control QP: a second endpoint over the same socket, same
    // format, so user traffic and agent traffic never share a receive queue.
    auto control_qp = rt->create_qp(control_capacity);
    io->sent = encode_endpoint_message({control_qp->local_endpoint(options.port, options.gid_index), mtu});
    check(co_await on_io(service, listener, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_write(io->socket, asio::buffer(io->sent), std::move(done));
                         }),
          who, limit, "sending our agent endpoint");
    check(co_await on_io(service, listener, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_read(io->socket, asio::buffer(io->received), std::move(done));
                         }),
          who, limit, "waiting for the peer's agent endpoint");
    endpoint_message remote_control;
    try {
        remote_control = decode_endpoint_message(io->received);
    } catch (const std::invalid_argument& e) {
        throw handshake_error(std::make_error_code(std::errc::protocol_error),
                              who + ": malformed agent endpoint message from the peer: " + e.what());
    }
    control_options.mtu = std::min(mtu, remote_control.mtu);
    control_qp->connect(remote_control.endpoint, control_options);
    options.mtu = std::min(mtu, remote.mtu);
    qp->connect(remote.endpoint, options);

    check(co_await on_io(service, listener, io,
                         [](const std::shared_ptr<tcp_io>& io, io_done done) {
                             asio::async_write(io->socket, asio::buffer(&io->ready_sent, 1), std::move(done));
                         }),
          who, limit, "telling the peer we are ready");
    check(co_await on_io(service, listener, io,
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
        throw handshake_error(std::make_error_code(std::errc::protocol_error),
                              who + ": malformed ready message from the peer: byte is " +
                                  std::to_string(io->ready_received) + ", expected " + std::to_string(ready_byte) +
                                  " ('R')");

    connection conn = assemble([&] {
        detail::connection_parts parts;
        parts.event_listener = rt->event_listener;
        parts.data = std::move(qp);
        parts.peer = peer;
        parts.watcher = std::move(channel);
        parts.agent_pool = rt->pool;
        parts.limits = settings.agent;
        return parts;
    }());
    attach_control(conn, std::move(control_qp));
    co_return conn;
}

// ----------------------------------------------------------- the acceptor

/// A client the io thread accepted, on its way to the event listener thread: a
/// plain descriptor, closed unless a handshake takes it.
struct accepted_client {
    int fd = -1;
    tcp protocol = tcp::v4();
    socket_address local{};
    std::string peer;

    accepted_client() = default;
    accepted_client(const accepted_client&) = delete;
    accepted_client& operator=(const accepted_client&) = delete;
    ~accepted_client() {
        if (fd >= 0)
            ::close(fd);
    }
};

struct accept_io {
    explicit accept_io(asio::io_context& context) : acceptor(context), retry(context) {}

    /// Io thread.
    void close() noexcept {
        asio::error_code ignored;
        acceptor.close(ignored);
        try {
            retry.cancel();
        } catch (const std::exception&) {
        }
    }

    tcp::acceptor acceptor;
    // Back-off after an accept error that is not the client's (EMFILE, ...).
    asio::steady_timer retry;
};

/// A listening TCP socket: clients the io thread accepts wait here until an
/// accept() takes them and runs the handshake. Event listener thread; destroyed
/// there.
class tcp_acceptor final : public acceptor, public std::enable_shared_from_this<tcp_acceptor> {
public:
    /// Binds and listens on the calling thread, so a bad or busy address
    /// throws at once.
    static std::shared_ptr<tcp_acceptor> make(std::shared_ptr<runtime> rt, connection_settings settings,
                                              const socket_address& where) {
        auto listener = rt->event_listener;
        std::shared_ptr<tcp_acceptor> self = owned_by_listener_thread(
            std::move(listener), new tcp_acceptor(std::move(rt), std::move(settings), where));
        asio::post(self->service_->context(),
                   [io = self->io_, listener = self->rt_->event_listener.get(), owner = self->weak_from_this()] {
                       accept_next(io, listener, owner);
                   });
        return self;
    }

    ~tcp_acceptor() override { shut(); }

    const std::string& address() const noexcept override { return address_; }

public:
    task<connection> accept(std::stop_token token) override {
        // Keeps us alive across the suspensions.
        std::shared_ptr<tcp_acceptor> self = shared_from_this();
        co_await rt_->event_listener->schedule();
        for (;;) {
            std::optional<std::shared_ptr<accepted_client>> client = co_await clients_->pop(token, "accept", address_);
            if (!client)
                throw disconnected_error("accept", address_, "the listener is closed");
            std::string peer = (*client)->peer;
            std::string failure;
            try {
                co_return co_await handshake(std::move(*client));
            } catch (const std::exception& e) {
                failure = e.what();
            }
            // The client gave up, timed out, is not a cordma peer or could
            // not agree on the path: drop it and wait for the next.
            std::fprintf(stderr, "cordma: listener %s: dropped a client from %s: %s\n", address_.c_str(),
                         peer.c_str(), failure.c_str());
        }
    }

    void close() override {
        auto self = shared_from_this();
        rt_->event_listener->post([self] { self->shut(); });
    }

private:
    tcp_acceptor(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where)
        : rt_(std::move(rt)), settings_(std::move(settings)), service_(&tcp_service::of(*rt_)),
          io_(std::make_shared<accept_io>(service_->context())) {
        std::string wanted = where.to_string();
        tcp::endpoint endpoint = to_endpoint(where);
        asio::error_code ec;
        auto fail = [&](const char* call) {
            throw std::system_error(ec, std::string(call) + "(" + wanted + ") for the TCP endpoint exchange");
        };
        if (io_->acceptor.open(endpoint.protocol(), ec); ec)
            fail("socket");
        if (io_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec); ec)
            fail("setsockopt(SO_REUSEADDR)");
        if (io_->acceptor.bind(endpoint, ec); ec)
            fail("bind");
        if (io_->acceptor.listen(128, ec); ec)
            fail("listen");
        tcp::endpoint bound = io_->acceptor.local_endpoint(ec);
        if (ec)
            fail("getsockname");
        address_ = endpoint_string(bound);
        // The settings are checked against the device now, so a bad one
        // fails listen(), not every accept. (A wildcard address is checked
        // per client, against the address that client reached.)
        if (!bound.address().is_unspecified())
            qp_options(settings_, *rt_->event_listener->device(), where.get(), 0, qp_role::data);
    }

    /// Io thread. One accept pending while the acceptor is open; each client
    /// goes to the event listener thread as a descriptor.
    static void accept_next(std::shared_ptr<accept_io> io, event_listener* listener, std::weak_ptr<tcp_acceptor> owner) {
        auto* raw = io.get();
        raw->acceptor.async_accept([io = std::move(io), listener, owner](const asio::error_code& ec,
                                                                         tcp::socket socket) mutable {
            if (ec == asio::error::operation_aborted || !io->acceptor.is_open())
                return;
            if (ec) {
                // Not this client's fault (out of descriptors, ...): try again
                // shortly rather than spin.
                io->retry.expires_after(std::chrono::milliseconds(100));
                auto* again = io.get();
                again->retry.async_wait([io = std::move(io), listener, owner](const asio::error_code& wait_ec) {
                    if (!wait_ec)
                        accept_next(io, listener, owner);
                });
                return;
            }
            auto client = std::make_shared<accepted_client>();
            asio::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            tcp::endpoint local = socket.local_endpoint(ignored);
            client->protocol = local.protocol();
            client->local = address_of(local);
            client->peer = endpoint_string(socket.remote_endpoint(ignored));
            client->fd = socket.release(ignored);
            if (client->fd >= 0)
                listener->post([owner, client] {
                    if (auto self = owner.lock())
                        self->on_accepted(client);
                });
            accept_next(std::move(io), listener, std::move(owner));
        });
    }

    /// Event listener thread.
    void on_accepted(std::shared_ptr<accepted_client> client) {
        clients_->push(std::move(client));  // after close() it is dropped: the socket closes
    }

    /// Event listener thread: the server's half of the handshake, bounded by
    /// connect_timeout.
    task<connection> handshake(std::shared_ptr<accepted_client> client) {
        auto io = std::make_shared<tcp_io>(service_->context(), client->protocol, client->fd);
        client->fd = -1;  // the socket owns it now
        io->local = client->local;
        auto channel = tcp_channel::make(rt_, io, client->peer);
        start_deadline(*service_, io, settings_.connect_timeout);
        co_return co_await exchange_endpoints(rt_, settings_, std::move(channel), client->peer,
                                              "accept from " + client->peer);
    }

    /// Event listener thread. Closes the listening socket and every client not yet
    /// taken (they read EOF); waiting accepts throw.
    void shut() noexcept {
        if (clients_->closed())
            return;
        clients_->close();  // the clients not taken are dropped: they read EOF
        try {
            asio::post(service_->context(), [io = io_] { io->close(); });
        } catch (const std::exception&) {
        }
    }

    std::shared_ptr<runtime> rt_;
    connection_settings settings_;
    tcp_service* service_;
    std::shared_ptr<accept_io> io_;
    std::string address_;
    std::shared_ptr<waiter_queue<std::shared_ptr<accepted_client>>> clients_ =
        waiter_queue<std::shared_ptr<accepted_client>>::make(rt_->event_listener);
};

}  // namespace

// ---------------------------------------------------------------- entries

task<connection> connect_tcp(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where) {
    std::string peer = where.to_string();
    std::string who = "connect to " + peer;
    co_await rt->event_listener->schedule();
    tcp_service& service = tcp_service::of(*rt);
    auto deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
    for (auto backoff = std::chrono::milliseconds(10);; backoff = std::min(backoff * 2, std::chrono::milliseconds(200))) {
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
        if (!connected.timed_out && connected.ec == asio::error::connection_refused) {
            // Nothing listening yet (a server started with its client): try
            // again until the connect deadline.
            if (std::chrono::steady_clock::now() + backoff < deadline) {
                co_await after(*rt->event_listener, backoff);
                continue;
            }
            throw handshake_error(std::make_error_code(std::errc::connection_refused),
                                  who + ": connection refused until builder::connect_timeout ran out (nothing "
                                        "listens on that TCP port; does the peer's builder use "
                                        "endpoint_exchange::tcp?)");
        }
        check(connected, who, settings.connect_timeout, "connecting over TCP");
        connection conn = co_await exchange_endpoints(rt, settings, std::move(channel), peer, who);
        connection_access::state(conn)->reopen = [rt, settings, where] { return connect_tcp(rt, settings, where); };
        co_return conn;
    }
}

listener listen_tcp(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where) {
    return listener_access::make(tcp_acceptor::make(std::move(rt), std::move(settings), where));
}

}  // namespace cordma::detail
