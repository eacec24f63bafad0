#pragma once
/// \file
/// cordma::rpc in the classic, blocking shape: a server that is a handler
/// object and `run()`, a client that connects and makes calls from plain
/// code. No coroutine, executor, signal mask or construction order for the
/// user to get right; underneath, the same rpc::server and rpc::client
/// (<cordma/rpc.hpp>, docs/rpc.md), the same wire protocol.
///
///     struct greeter : cordma::rpc::blocking_handler {
///         std::vector<std::byte> handle(std::uint32_t method, std::span<const std::byte> request) override {
///             return cordma::rpc::bytes_of("hello, " + cordma::rpc::text_of(request));
///         }
///     };
///     greeter g;
///     cordma::rpc::blocking_server s("10.0.0.1:7471", g);
///     s.run();                       // until s.stop(), SIGINT or SIGTERM
///
///     cordma::rpc::blocking_client c;
///     c.connect("10.0.0.1", 7471);
///     std::string answer = c.call(1, "world");
///
/// Threads: handlers run on a small pool of threads the server owns
/// (blocking_server_options::threads), so one that blocks delays only its
/// own call; the event listener thread keeps serving the other clients.
/// Client calls block the calling thread, never the event listener's.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/export.hpp>
#include <cordma/rpc.hpp>

namespace cordma::rpc {

/// `text`'s bytes, copied (for requests and responses made of text).
inline std::vector<std::byte> bytes_of(std::string_view text) {
    auto b = std::as_bytes(std::span<const char>(text.data(), text.size()));
    return {b.begin(), b.end()};
}
/// `bytes` as a std::string, copied (no encoding is checked).
inline std::string text_of(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

/// The application side of a blocking_server: answers each call with
/// plain, blocking code. One object serves every client; with more than one
/// server thread, handle() runs on several threads at once, so what it
/// shares must be thread-safe.
class CORDMA_API blocking_handler {
public:
    /// Handlers are destroyed by their owner, after the server.
    virtual ~blocking_handler();
    /// The response to a call of `method` (any method not registered with
    /// blocking_server::handle) with `request`'s bytes, valid until it
    /// returns. Runs on one of the server's threads (or the event listener
    /// thread, with threads = 0). What it throws goes back to the caller as
    /// rpc_error(handler_failed, its what()); the server goes on. It may
    /// call blocking_server::stop().
    virtual std::vector<std::byte> handle(std::uint32_t method, std::span<const std::byte> request) = 0;
};

/// In a blocking handler (blocking_handler::handle, a blocking_function),
/// on the thread running it: the trace id of the call it is answering
/// (call_options::trace on the client), or an empty one for an untraced
/// call and anywhere else. A coroutine handler reads request::trace().
CORDMA_API trace_id current_trace() noexcept;

/// A plain callable answering one method: request bytes in (valid until it
/// returns), response bytes out. Runs as blocking_handler::handle does.
using blocking_function = std::function<std::vector<std::byte>(std::span<const std::byte>)>;

/// A blocking_server's settings, fixed at construction.
struct blocking_server_options {
    /// Threads the server owns to run handlers on (1 to 256): calls whose
    /// handlers block wait only for a free thread, and the event listener
    /// thread goes on serving everyone else. 0: run handlers inline on the
    /// event listener thread, with no thread hop (the fastest) but only
    /// for handlers that never block, since one that does stalls every
    /// client.
    std::size_t threads = 4;
    /// true (the default): while run() runs, SIGINT and SIGTERM stop it.
    /// run() installs process-wide handlers (sigaction, SA_RESTART) that
    /// only write to an eventfd, which a thread of run()'s turns into
    /// stop(); it restores the previous handlers before returning. A
    /// signal whose disposition was SIG_IGN (a background job's SIGINT,
    /// nohup) stays ignored. On by default because the classic server
    /// program is stopped with Ctrl-C or `kill`, and should then return
    /// from run() and shut down cleanly rather than die mid-call. Set it
    /// false if the program handles signals itself, or runs more than one
    /// server at a time (only one run() may handle signals at once).
    bool handle_signals = true;
    /// The rpc::server's settings (credits, eager size, limits);
    /// its executor must be left empty (the server's threads are the
    /// executor; std::invalid_argument otherwise).
    server_options rpc{};
};

/// The classic RPC server: bound at construction, serving from run() until
/// stop(), SIGINT or SIGTERM. Not movable (handlers and signal handling
/// refer to it). Destroying it closes every client's connection, then
/// joins its threads (a handler that never returns keeps it waiting).
class CORDMA_API blocking_server {
public:
    /// Listens on `address` ("host:port"; port 0: any free port, address()
    /// says which) with a default builder, and serves every method with
    /// `handler`, which must outlive the server. Clients may connect from
    /// now on; their calls are answered once run() runs. Throws as
    /// builder::listen does, std::invalid_argument for options out of
    /// range.
    blocking_server(std::string_view address, blocking_handler& handler, blocking_server_options options = {});
    /// The same, with no handler object: only methods registered with
    /// handle() are served (others fail with unknown_method).
    explicit blocking_server(std::string_view address, blocking_server_options options = {});
    /// The same over `b` (its device, settings, event listener), which the
    /// server sets up for rpc before it listens.
    blocking_server(builder b, std::string_view address, blocking_handler& handler,
                    blocking_server_options options = {});
    /// Over `b`, with no handler object (methods registered with handle()).
    blocking_server(builder b, std::string_view address, blocking_server_options options = {});
    blocking_server(const blocking_server&) = delete;
    blocking_server& operator=(const blocking_server&) = delete;
    /// Stops serving (if run() still runs on another thread, call stop()
    /// and wait for it first), closes the clients' connections and joins
    /// the server's threads.
    ~blocking_server();

    /// Serves `method` with `f` instead of the handler object; `name` is
    /// how logs and errors call it. Throws std::invalid_argument for a
    /// method registered already or an empty `f`. Register before run().
    void handle(std::uint32_t method, std::string name, blocking_function f);

    /// The address it listens on, "ip:port" (the port chosen, for port 0).
    const std::string& address() const noexcept;

    /// Serves clients on the calling thread until stop() (or, with
    /// handle_signals, SIGINT or SIGTERM); then stops accepting, waits for
    /// the calls in progress to be answered, and returns. Connections stay
    /// up until the server is destroyed. Once only: a second call throws
    /// std::logic_error, as does a call from the event listener thread.
    /// Returns at once if stop() came first. Throws std::logic_error if
    /// another server's run() handles signals now.
    void run();

    /// Makes run() return (or return at once, if it has not started).
    /// Thread-safe and non-blocking: call it from any thread, from a
    /// handler, from a signal watcher.
    void stop() noexcept;

    /// The signal that stopped run() (SIGINT, SIGTERM), or 0.
    int stopped_by_signal() const noexcept;

    /// The rpc::server underneath (its clients, options, SRQ).
    rpc::server& server() noexcept;

private:
    struct state;
    std::unique_ptr<state> state_;
};

/// A blocking_client's settings, fixed at connect.
struct blocking_client_options {
    /// How long each call may take unless it says otherwise (positive);
    /// then it fails with rpc_errc::timed_out.
    std::chrono::milliseconds timeout{30'000};
    /// How long connect() keeps trying a server that refuses (not
    /// listening yet) before it fails (positive).
    std::chrono::milliseconds connect_timeout{10'000};
    /// The rpc::client's settings (eager size, max_response); its deadline
    /// is `timeout`.
    client_options rpc{};
};

/// The classic RPC client: connect, then blocking calls from any thread
/// (several threads may call at once; their calls share the connection).
/// Never call it from the event listener thread (a handler running inline):
/// std::logic_error. Move-only; destroying it closes the connection.
class CORDMA_API blocking_client {
public:
    /// Not connected yet, with a default builder.
    blocking_client();
    /// Not connected yet, with these options and a default builder.
    explicit blocking_client(blocking_client_options options);
    /// Not connected yet, over `b` (its device and settings).
    blocking_client(builder b, blocking_client_options options = {});
    /// Takes over `other`'s connection; `other` is left unconnected.
    blocking_client(blocking_client&&) noexcept;
    /// Closes this client's connection, then takes over `other`'s.
    blocking_client& operator=(blocking_client&&) noexcept;
    /// Closes the connection, as close() does.
    ~blocking_client();

    /// Connects to the rpc server at `address` ("host:port"), blocking
    /// until it is connected. Throws std::logic_error if connected already,
    /// as builder::connect does otherwise (std::errc::connection_refused
    /// once connect_timeout has passed), and rpc_error(protocol) if the
    /// listener is not an rpc server.
    void connect(std::string_view address);
    /// Connects to `host`:`port`, as connect(address) does.
    void connect(std::string_view host, std::uint16_t port);
    /// Whether connect() succeeded and close() has not been called.
    bool connected() const noexcept;

    /// Calls `method` with `request` (valid until it returns) and blocks
    /// until its response, which it returns. Throws rpc_error: timed_out
    /// after blocking_client_options::timeout, server_gone, unknown_method,
    /// handler_failed (the handler's what()); std::logic_error if not
    /// connected.
    std::vector<std::byte> call(std::uint32_t method, std::span<const std::byte> request);
    /// The same, with its own timeout (positive).
    std::vector<std::byte> call(std::uint32_t method, std::span<const std::byte> request,
                                std::chrono::milliseconds timeout);
    /// The same with call_options: a trace id (call_options::trace, which
    /// the server's blocking handler reads with current_trace()), a
    /// stop_token from another thread, and a deadline (0, the default:
    /// blocking_client_options::timeout).
    std::vector<std::byte> call(std::uint32_t method, std::span<const std::byte> request,
                                const call_options& options);
    /// The same with text: `request`'s bytes go, the response comes back as
    /// a std::string.
    std::string call(std::uint32_t method, std::string_view request);
    /// The same with text and its own timeout (positive).
    std::string call(std::uint32_t method, std::string_view request, std::chrono::milliseconds timeout);

    /// Closes the connection gracefully and waits for it (on the event
    /// listener thread, it only starts the close); calls blocked in other
    /// threads fail with cancelled. Never throws: a broken connection is
    /// closed already. Does nothing if not connected. connect() may be
    /// called again afterwards.
    void close();

    /// The server, "ip:port" (empty if not connected).
    const std::string& peer() const noexcept;
    /// The rpc::client underneath (for coroutine calls, call_as, options).
    rpc::client& client();

private:
    builder builder_;
    blocking_client_options options_;
    rpc::client client_;
    std::string peer_;
    bool connected_ = false;
};

}  // namespace cordma::rpc
