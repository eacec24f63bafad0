#pragma once
/// \file
/// cordma::rpc: request/response calls over RDMA, many clients to one
/// server, any sizes.
///
///     cordma::builder b;
///     cordma::rpc::server server(b, {.credits = 16});   // b's connections share one SRQ
///     server.handle(1, "echo", [](cordma::rpc::request r) -> cordma::task<std::vector<std::byte>> {
///         co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
///     });
///     co_await server.serve(b.listen("0.0.0.0:7471"), stop);  // until `stop` is requested
///
///     cordma::rpc::client c = co_await cordma::rpc::client::connect(cb, "10.0.0.1:7471");
///     std::vector<std::byte> answer = co_await c.call(1, bytes);  // many in flight at once
///
/// Without an allocation per call: the handler writes into the response
/// frame, the client's response lands in the caller's memory.
///
///     server.handle_into(2, "echo", [](cordma::rpc::request r, std::span<std::byte> reply)
///                                       -> cordma::task<std::size_t> {
///         if (r.bytes().size() > reply.size())  // reply: as much as the client takes inline
///             throw std::length_error("too long to echo");
///         std::memcpy(reply.data(), r.bytes().data(), r.bytes().size());
///         co_return r.bytes().size();
///     });
///     std::size_t n = co_await c.call_into(2, bytes, buffer);  // buffer: a std::span<std::byte>
///
/// Protocol (lib/rpc/rpc_wire.hpp, docs/rpc.md): one SEND per frame.
/// - Requests and responses up to the eager size go inline: into the
///   server's shared receive queue (one for all clients), or the client's
///   own posted receives. Larger ones go by rendezvous: the sender
///   registers its buffer and sends its address; the receiver RDMA-READs it
///   straight into the memory it hands the handler (request) or returns
///   (response). No copy of a large payload on either side.
/// - Credits: the server grants each client up to `credits` calls in
///   flight, out of one budget (its receives) shared fairly by its
///   clients; a response hands its call's credit back (a large response's
///   once the client has read it). Calls beyond the credits wait in the
///   client, in order, so no client can fill the server's receives.
/// - Matching: the client numbers its calls; responses come back in any
///   order and find their call by number. A call whose deadline passes or
///   whose token stops fails at once (rpc_errc::timed_out / cancelled); its
///   response, if it still comes, is dropped (a large one unread).
/// - Liveness: while calls wait, the client RDMA-READs an 8-byte word of
///   the server's once a second (its device answers, whatever its process
///   is doing). A server whose process ends closes its connections, which
///   fails every pending call at once; one whose host stops answering
///   leaves a read unanswered, and after 3 s every pending call fails with
///   rpc_errc::server_gone: within 5 s either way.
///
/// Errors: rpc_error, a std::system_error whose code is an rpc_errc and
/// whose message names the call, the method and the server. An unknown
/// method, a handler that throws, and a request over the server's limit
/// fail that call only; a malformed frame closes that client's connection
/// only (the server logs the violation and serves the others).
///
/// Threads: handlers run inline on the event listener thread by default
/// (no thread hop: the fastest, but a handler that blocks stalls every
/// connection of that event listener); give server_options::executor to run them
/// elsewhere (an Asio thread pool, say), at the cost of two thread hops a
/// call. Client calls resume on the event listener thread.
///
/// The classic blocking shape (a handler object, `run()` until stopped or
/// signalled, a client making blocking calls) is <cordma/rpc_blocking.hpp>,
/// built on these two.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <cordma/builder.hpp>
#include <array>

#include <cordma/connection.hpp>
#include <cordma/export.hpp>
#include <cordma/latency_histogram.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>

struct ibv_srq;

namespace cordma::rpc {

/// What an rpc_error says went wrong.
enum class rpc_errc {
    unknown_method = 1,  ///< the server has no handler for the method
    handler_failed = 2,  ///< the handler threw (the message is its what())
    too_large = 3,       ///< over the server's max_request or the client's max_response
    protocol = 4,        ///< a malformed frame, or a peer that is not a cordma rpc peer
    timed_out = 5,       ///< the call's deadline passed (compares equal to std::errc::timed_out)
    cancelled = 6,       ///< the call's token stopped, or the client closed
    server_gone = 7,     ///< the connection to the server broke (closed, failed, host gone)
};

/// The category of rpc_errc codes ("cordma.rpc"); its messages are the
/// enumerators' meanings, and it maps timed_out to std::errc::timed_out.
/// One object for the program's life.
CORDMA_API const std::error_category& rpc_category() noexcept;
/// Makes rpc_errc values std::error_codes (found by argument-dependent
/// lookup, so `ec == rpc_errc::server_gone` compiles).
inline std::error_code make_error_code(rpc_errc e) noexcept { return {static_cast<int>(e), rpc_category()}; }

/// What rpc calls and servers throw: a std::system_error whose code() is an
/// rpc_errc in rpc_category(), and whose what() names the call, the method
/// and the server. Catch it by this type, or as std::system_error and
/// compare code() with rpc_errc values.
class CORDMA_API rpc_error : public std::system_error {
public:
    /// An error of kind `code`, with `what` as its message.
    rpc_error(rpc_errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
    /// The kind of error (code() as an rpc_errc).
    rpc_errc errc() const noexcept { return static_cast<rpc_errc>(code().value()); }
};

/// A server's settings, fixed at construction; checked then (a value out of
/// range throws std::invalid_argument naming the field).
struct server_options {
    /// Requests up to this many bytes travel inline (each receive of the
    /// server holds one, behind its header, of 16 bytes, in a receive of
    /// eager_size + 48 bytes, as every frame's must fit); larger ones by
    /// rendezvous. 64 B to 1 MiB.
    std::size_t eager_size = 4096;
    /// Receives in the shared receive queue, for all clients together, and
    /// the budget their credits come out of: the SRQ never runs dry (no
    /// receiver-not-ready retries), however many clients. With more than
    /// receives / credits clients each gets its fair share (at least 1 in
    /// turn), credits coming back go to clients waiting for them, and idle
    /// clients are asked for their unused ones (docs/rpc.md, "Fair
    /// credits"). At least `credits`.
    std::size_t receives = 512;
    /// The most calls one client may have in flight (1 to 1024): what each
    /// gets while receives >= credits x clients.
    std::uint32_t credits = 16;
    /// The largest request accepted; larger ones fail with too_large.
    std::size_t max_request = std::size_t(1) << 30;
    /// Where handlers run: empty = inline on the event listener thread.
    /// Given, each handler starts inside a function passed to it (run it
    /// on any thread, e.g. asio::post(pool, f)); the response is sent from
    /// the event listener thread.
    std::function<void(std::function<void()>)> executor{};
    /// true: one shared receive queue (SRQ) for every client, when the
    /// device has SRQs (else a receive queue per client, said on stderr).
    /// false: a receive queue of `credits` receives per client, always.
    bool shared_receives = true;
};

/// The request a handler gets. Its bytes stay valid until the handler's
/// task completes (they are the server's receive buffer, or the memory a
/// large request was read into: not copied).
class CORDMA_API request {
public:
    /// The request's bytes as the client sent them; valid until the
    /// handler's task completes.
    std::span<const std::byte> bytes() const noexcept { return bytes_; }
    /// The method the client called (the number given to server::handle).
    std::uint32_t method() const noexcept { return method_; }
    /// The client's address, as errors and logs name it.
    const std::string& peer() const noexcept { return *peer_; }
    /// The trace id the client gave the call (call_options::trace; empty
    /// if none): pass it on to the calls this handler makes.
    const trace_id& trace() const noexcept { return trace_; }

    /// Made by the server for each call; `peer` must outlive the request.
    /// (Public so handlers can be tested without a server.)
    request(std::span<const std::byte> bytes, std::uint32_t method, const std::string* peer,
            const trace_id& trace = {}) noexcept
        : bytes_(bytes), method_(method), peer_(peer), trace_(trace) {}

private:
    std::span<const std::byte> bytes_;
    std::uint32_t method_ = 0;
    const std::string* peer_ = nullptr;
    trace_id trace_;
};

/// A handler: the response bytes for a request. What it throws goes back to
/// the caller as rpc_error(handler_failed, its what()); the server goes on.
using handler = std::function<task<std::vector<std::byte>>(request)>;

/// A handler that writes its response into `reply` and returns how many
/// bytes it wrote (server::handle_into): a call then allocates nothing on
/// the server. `reply` is the response frame itself, in registered
/// memory, and holds as much as the calling client takes inline (its
/// client_options::eager_size, 4096 bytes by default); it is valid until
/// the handler's task completes. Returning more than reply.size() fails the
/// call with handler_failed. What it throws goes back as with handler.
using reply_handler = std::function<task<std::size_t>(request, std::span<std::byte> reply)>;

namespace detail {
class server_state;
class client_state;
template <class T>
std::vector<std::byte> to_bytes(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "rpc typed calls take trivially copyable types");
    std::vector<std::byte> out(sizeof(T));
    std::memcpy(out.data(), &value, sizeof(T));
    return out;
}
template <class T>
T from_bytes(std::span<const std::byte> bytes, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>, "rpc typed calls take trivially copyable types");
    if (bytes.size() != sizeof(T))
        throw std::invalid_argument(std::string("cordma::rpc: ") + what + " of " + std::to_string(bytes.size()) +
                                    " bytes, expected " + std::to_string(sizeof(T)));
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
}
}  // namespace detail

/// What one method's calls came to (server::metrics): exact counts, kept
/// on the event listener thread and read from any thread.
struct method_metrics {
    /// The method number (0 for handle_any's entry).
    std::uint32_t method = 0;
    /// True for handle_any's entry: the calls to methods without their own.
    bool any_method = false;
    /// The name it was registered with.
    std::string name;
    /// Calls received.
    std::uint64_t calls = 0;
    /// Calls answered with a response.
    std::uint64_t answered = 0;
    /// Calls answered with an error (the handler threw, too large, a
    /// request that could not be read).
    std::uint64_t failed = 0;
    /// Calls whose client was gone, or the server shut, before the answer.
    std::uint64_t abandoned = 0;
    /// The failed calls by why, indexed by rpc_errc's value: handler_failed
    /// (the handler threw), too_large (a response over the client's
    /// max_response), protocol (a request that could not be read: its
    /// client's connection broke). They add up to `failed`.
    std::array<std::uint64_t, 8> errors{};
    /// How long its calls answered with a response took here: from the
    /// server loop's turn that received the request to the one that saw
    /// the answer's send complete (a large request's read, the handler, and
    /// the answer, or its rendezvous notice, reaching the client's device).
    latency_histogram latency;
    /// Calls received and not yet answered (their handlers run).
    std::uint64_t in_flight() const noexcept { return calls - answered - failed - abandoned; }
};

/// What an rpc server's calls came to, by method (server::metrics).
struct server_metrics {
    /// One per registered method, by method number; handle_any's last.
    std::vector<method_metrics> methods;
    /// Calls to a method with no handler (answered with unknown_method).
    std::uint64_t unknown_method = 0;
};

/// An rpc server: handlers registered by method number, serving the clients
/// of one or more listeners of its builder. Handlers run as coroutines on
/// the event listener thread (or on server_options::executor), many at
/// once; each call's response is sent when its handler's task completes.
/// Move-only; destroying it closes every client's connection.
class CORDMA_API server {
public:
    /// Sets `b` up for rpc, for listeners made from it afterwards: plain
    /// connections (builder::agent(false)), the server's hello in the
    /// accept's private data, and a shared receive queue on its device
    /// (server_options::receives of eager_size + 48 bytes) that every
    /// connection receives through; a builder left at min_rnr_timer 0
    /// (655 ms) gets 12 (0.64 ms), so a client that finds the receives
    /// full retries soon, and one left at rnr_retry 6 gets 7 ("forever"):
    /// the server's first frame to a client, its credits, may reach it
    /// before the client has posted its receives, and is retried until it
    /// has. Throws std::invalid_argument for options out of range, naming
    /// the field.
    explicit server(builder& b, server_options options = {});
    /// Takes over `other`'s clients and handlers; `other` is left empty.
    server(server&&) noexcept = default;
    /// Closes this server's clients (as the destructor does), then takes
    /// over `other`'s.
    server& operator=(server&&) noexcept;
    server(const server&) = delete;
    server& operator=(const server&) = delete;
    /// Closes every client's connection; calls in progress are answered
    /// with nothing (their clients see server_gone).
    ~server();

    /// Registers `h` for `method`; `name` is how logs and errors call it.
    /// Throws std::invalid_argument for a method registered already or an
    /// empty handler. Register before serving (or from the event listener
    /// thread).
    void handle(std::uint32_t method, std::string name, handler h);
    /// Registers `h`, which writes its response in place (reply_handler),
    /// for `method`: with client::call_into, a call allocates nothing on
    /// either side. A response larger than the client's receives hold at
    /// that moment (they start small and grow, docs/rpc.md) is copied out
    /// and lent by rendezvous, as handle()'s are. Throws as handle().
    void handle_into(std::uint32_t method, std::string name, reply_handler h);
    /// Registers `h` for every method without a handler of its own (the
    /// request's method() says which was called); `name` is how logs and
    /// errors call it. Without it, such calls fail with unknown_method.
    /// Throws std::invalid_argument for an empty handler or a second one.
    /// Register before serving (or from the event listener thread).
    void handle_any(std::string name, handler h);

    /// A handler taking and returning trivially copyable structs (a request
    /// of another size fails the call with handler_failed).
    template <class Request, class Response, class F>
    void handle_as(std::uint32_t method, std::string name, F f) {
        handle(method, std::move(name), [f = std::move(f)](request r) -> task<std::vector<std::byte>> {
            Request in = detail::from_bytes<Request>(r.bytes(), "request");
            Response out = co_await f(in);
            co_return detail::to_bytes(out);
        });
    }

    /// Accepts clients from `l` (made from the builder given to the
    /// constructor, after it) and serves them until `token` stops (or the
    /// listener is closed); then stops accepting, waits for the calls in
    /// progress of clients still connected to be answered (a handler that
    /// never returns keeps it waiting), and returns; connections stay up
    /// until the server is destroyed. A client that is not an rpc client is refused
    /// and logged. Throws std::logic_error, before accepting anyone, for a
    /// listener made before the server or from another builder (it would
    /// refuse every rpc client: it took the builder's settings before the
    /// constructor set them up); make the server first, then listen.
    task<void> serve(listener l, std::stop_token token = {});

    /// Each method's calls so far: received, answered, failed, abandoned,
    /// in flight. Any thread; each count exact as of its reading (the
    /// connections' own counters: builder::metrics()).
    server_metrics metrics() const;
    /// Clients connected now.
    std::size_t clients() const;
    /// Their connections (a snapshot), e.g. to inspect their QPs.
    std::vector<cordma::connection> connections() const;
    /// The SRQ every client's connection receives through (nullptr: a
    /// receive queue per client).
    ibv_srq* shared_receive_queue() const;
    /// The options it was made with.
    const server_options& options() const;

private:
    std::shared_ptr<detail::server_state> state_;
};

/// What a client's calls came to (client::metrics): exact counts, kept on
/// the event listener thread and read from any thread.
struct client_metrics {
    /// Calls made (refused ones included: too large, or on a broken
    /// connection).
    std::uint64_t calls = 0;
    /// Calls answered with a response.
    std::uint64_t answered = 0;
    /// Calls that ended with an error, by rpc_errc's value (index 1:
    /// unknown_method ... 7: server_gone), what the call threw.
    std::array<std::uint64_t, 8> errors{};
    /// How long its calls answered with a response took: from the turn of
    /// the client's event listener loop that started the call (a wait for
    /// a credit included) to the one that took the answer.
    latency_histogram latency;
    /// The errors summed.
    std::uint64_t failed() const noexcept {
        std::uint64_t n = 0;
        for (std::uint64_t e : errors)
            n += e;
        return n;
    }
    /// Calls made and not yet ended.
    std::uint64_t in_flight() const noexcept { return calls - answered - failed(); }
};

/// A client's settings, fixed at connect.
struct client_options {
    /// Responses up to this many bytes travel inline into the client's
    /// receives; larger ones by rendezvous. 64 B to 1 MiB. The receives
    /// hold 208 bytes while responses are small (an idle client pins a few
    /// KiB): the first larger response comes by rendezvous while the
    /// server asks them to grow to this size, and a second without one
    /// makes them small again (docs/rpc.md, "Elastic receives").
    std::size_t eager_size = 4096;
    /// A call's deadline unless the call says otherwise (positive).
    std::chrono::milliseconds deadline{30'000};
    /// The largest response accepted; larger ones fail with too_large.
    std::size_t max_response = std::size_t(1) << 30;
};

/// Limits of one call (client::call's last argument).
struct call_options {
    /// How long the call may take in all, from the moment it is made
    /// (waiting for a credit included); then it fails with timed_out.
    /// 0: client_options::deadline.
    std::chrono::milliseconds deadline{0};
    /// Stops the call early, from any thread: it fails with cancelled at
    /// once (its response, if it comes, is dropped).
    std::stop_token token{};
    /// The call's trace id (empty: none). It travels in the request frame
    /// to the server's handler (request::trace()), shows in both ends'
    /// stuck reports and errors, and opens a span on each end's span hook
    /// (trace.hpp). 16 bytes more in the request; nothing for an
    /// untraced call.
    trace_id trace{};
};

/// An rpc client: one connection to one server, carrying many calls at
/// once (up to the server's credits in flight, the rest waiting in order).
/// Move-only; destroying it closes the connection gracefully, in the
/// background (as close() does: the server is told).
class CORDMA_API client {
public:
    /// An empty handle: calls throw std::logic_error.
    client() = default;
    /// Connects to an rpc server at `address` ("host:port") with `b`'s
    /// settings (a copy of it, made plain: builder::agent(false), with the
    /// client's hello as private data; a builder left at min_rnr_timer 0,
    /// 655 ms, gets 12, 0.64 ms: the server's first frame, its credits,
    /// may arrive before the client has posted its receives, and then
    /// waits that long). Throws as builder::connect does, and
    /// rpc_error(protocol) if the listener is not an rpc server.
    static task<client> connect(builder b, std::string address, client_options options = {});
    /// Takes over `other`'s connection and calls; `other` is left empty.
    client(client&&) noexcept = default;
    /// Closes this client's connection (as the destructor does), then
    /// takes over `other`'s.
    client& operator=(client&&) noexcept;
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    /// Closes the connection gracefully in the background, as close()
    /// does; pending calls fail with cancelled ("the client was destroyed").
    ~client();

    /// Sends `request` to `method` and returns the response. Many calls may
    /// be in flight at once, from any coroutines, any thread; each resumes
    /// on the event listener thread. `request` must stay valid until the
    /// call returns; one over the eager size is read by the server straight
    /// from that memory, and if its call ends early (deadline, token) the
    /// server may still read it until it answers (the client keeps it
    /// registered until then). Throws rpc_error.
    task<std::vector<std::byte>> call(std::uint32_t method, std::span<const std::byte> request,
                                      call_options options = {});
    /// The same as call, with the response written into `response` (the
    /// caller's memory, valid until the call returns) and its size
    /// returned: a call then allocates nothing on the client. A response
    /// larger than `response` fails the call with too_large (naming both
    /// sizes; the response is dropped). A response by rendezvous (over the
    /// eager size) is read into the client's own memory first and copied.
    task<std::size_t> call_into(std::uint32_t method, std::span<const std::byte> request,
                                std::span<std::byte> response, call_options options = {});
    /// A typed call: trivially copyable request and response structs.
    template <class Response, class Request>
    task<Response> call_as(std::uint32_t method, Request request, call_options options = {}) {
        std::vector<std::byte> in = detail::to_bytes(request);
        std::vector<std::byte> out = co_await call(method, in, std::move(options));
        co_return detail::from_bytes<Response>(out, "response");
    }
    /// The same as call, blocking, for code outside coroutines (never on
    /// the event listener thread: std::logic_error there).
    std::vector<std::byte> call_sync(std::uint32_t method, std::span<const std::byte> request,
                                     call_options options = {});

    /// Closes the connection gracefully; pending calls fail with cancelled.
    task<void> close();

    /// The server, as errors name it.
    const std::string& peer() const;
    /// The calls the server lets this client have in flight.
    std::uint32_t credits() const;
    /// The underlying connection (its QP, its settings).
    const cordma::connection& connection() const;
    /// Its calls so far: made, answered, failed by error, in flight. Any
    /// thread; each count exact as of its reading.
    client_metrics metrics() const;

private:
    explicit client(std::shared_ptr<detail::client_state> state) : state_(std::move(state)) {}
    detail::client_state& checked(const char* call) const;
    void drop() noexcept;
    std::shared_ptr<detail::client_state> state_;
};

}  // namespace cordma::rpc

template <>
struct std::is_error_code_enum<cordma::rpc::rpc_errc> : std::true_type {};
