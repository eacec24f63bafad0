// rpc_server: answers requests from many clients at once, over RDMA
// SEND/RECV (the wire format and the credit rule are in protocol.hpp).
//
// Usage: rpc_server ADDRESS [--depth N] [--clients N] [--accept-timeout S]
//   ADDRESS      where to listen: "ip:port", ip an address of an RDMA device
//                (or 0.0.0.0), port an rdma_cm port (not a TCP one; 0: any
//                free port)
//   --depth N    receives kept posted per client = the credits it is given:
//                how many requests it may have outstanding (default 64)
//   --clients N  exit once N clients have come and gone (default: serve
//                until killed)
//   --accept-timeout S
//                give up waiting for the next client after S seconds: stop
//                accepting, let the clients already connected finish, and
//                exit; with status 1 if --clients N was given and fewer came
//                (default: wait for clients as long as it takes)
//
// Once it listens it prints "rpc_server: listening on IP:PORT" (the port it
// got, if ADDRESS asked for 0): a script can start its clients when that line
// arrives (examples/rpc/demo.sh does).
//
// Everything runs on the builder's event listener thread, one coroutine per
// job:
//   serve()           accepts clients, starts a session() for each
//   session()         posts `depth` receives (a serve_requests() each), then
//                     waits for the client to leave
//   serve_requests()  receive a request, answer it (hello: with the credits;
//                     anything else: with the handler), post the receive
//                     again, send the response; repeat
//   handle()          the application: echo, add, upper
// A client that disconnects (or is killed) ends its session; a client that
// breaks the protocol is disconnected. Neither affects the other clients.

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include <cordma/builder.hpp>
#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "command_line.hpp"
#include "protocol.hpp"

using namespace cordma;

namespace {

/// What a handler produced: the response's status and how many payload bytes
/// it wrote.
struct answer {
    rpc::status code = rpc::status::ok;
    std::size_t length = 0;
};

/// Runs one request: reads its payload, writes the response payload into
/// `response` (rpc::max_payload bytes). Called on the event listener thread,
/// inline: it must not block, or every client waits.
using handler = std::function<answer(rpc::method, std::string_view request, std::span<char> response)>;

answer handle(rpc::method method, std::string_view request, std::span<char> response) {
    switch (method) {
    case rpc::method::echo:
        std::memcpy(response.data(), request.data(), request.size());
        return {rpc::status::ok, request.size()};
    case rpc::method::upper:
        for (std::size_t i = 0; i < request.size(); ++i)
            response[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(request[i])));
        return {rpc::status::ok, request.size()};
    case rpc::method::add: {
        auto operands = rpc::from_payload<rpc::add_request>(request);
        if (!operands)
            return {rpc::status::bad_request, 0};
        // Wraps around instead of overflowing (which would be undefined).
        auto sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(operands->a) +
                                             static_cast<std::uint64_t>(operands->b));
        std::memcpy(response.data(), &sum, sizeof sum);
        return {rpc::status::ok, sizeof sum};
    }
    case rpc::method::hello:
        break;
    }
    return {rpc::status::unknown_method, 0};
}

void say(const std::string& line) {
    std::printf("rpc_server: %s\n", line.c_str());
    std::fflush(stdout);  // the demo reads our output through a file
}

std::string describe(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "an unknown exception";
    }
}

/// True if `error` only says the client went away: its disconnect flushed
/// our posted receives (or a later operation found the connection closed).
bool client_left(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const work_completion_error& e) {
        return e.status() == IBV_WC_WR_FLUSH_ERR;
    } catch (const disconnected_error&) {
        return true;
    } catch (...) {
        return false;
    }
}

struct totals {
    std::uint64_t clients = 0;
    std::uint64_t calls = 0;
    bool gave_up = false;  // --accept-timeout ran out waiting for a client
};

/// What the workers of one client share. Listener thread only.
struct session_state {
    session_state(connection c, const handler& h) : conn(std::move(c)), handle(h) {}

    connection conn;
    const handler& handle;
    std::uint32_t credits = 0;
    std::uint64_t calls = 0;
    std::exception_ptr failure;  // the first error that was not the client leaving
};

/// One receive kept posted for the whole session, and the requests that land
/// in it. Returns when the connection ends; never throws.
task<void> serve_requests(session_state& s, local_slice in, local_slice out) {
    std::exception_ptr error;
    try {
        recv_result got = co_await s.conn.recv(in);
        for (;;) {
            rpc::message request = rpc::decode(in.bytes().first(got.length));
            std::span<char> response = rpc::payload_area(out.bytes());
            answer a;
            if (request.head.op == rpc::method::hello) {
                // The session's own method: how many requests the client may
                // have outstanding.
                auto hello = rpc::hello{.credits = s.credits, .max_message = rpc::max_message};
                std::memcpy(response.data(), &hello, sizeof hello);
                a = {rpc::status::ok, sizeof hello};
            } else {
                a = s.handle(request.head.op, request.payload, response);
                ++s.calls;
            }
            std::size_t length = rpc::write_header(
                out.bytes(), {.id = request.head.id, .op = request.head.op, .code = a.code,
                              .length = static_cast<std::uint32_t>(a.length)});
            // Post the receive again before sending the response: once the
            // client has the response it may send its next request at once,
            // and that request must find a receive waiting. (when_all starts
            // the receive first; `in` is free, the request was used above.)
            auto [next, sent] = co_await when_all(s.conn.recv(in), s.conn.send(out.slice(0, length)));
            (void)sent;
            got = next;
        }
    } catch (...) {
        error = std::current_exception();
    }
    if (!client_left(error)) {
        if (!s.failure)
            s.failure = error;
        // Disconnect the client: that flushes the other workers' receives,
        // so they end too.
        co_await s.conn.close();
    }
}

/// Serves one client until it leaves. Never throws: whatever happens to one
/// client is logged and does not concern the others.
task<void> session(connection conn, std::shared_ptr<memory_pool> pool, std::uint32_t depth, const handler& handle,
                   totals& total) {
    session_state s(conn, handle);
    s.credits = depth;
    std::string peer = conn.peer();
    task_group workers;
    try {
        // One registered region for all of this client's buffers: a receive
        // buffer and a send buffer per credit.
        local_mr buffers = pool->allocate(2 * std::size_t{depth} * rpc::max_message);
        auto buffer = [&](std::size_t i) { return buffers.slice(i * rpc::max_message, rpc::max_message); };
        // This runs inline from accept(), before the listener thread handles
        // anything else, so the receives are posted the moment the
        // connection is up: the client's first request finds one.
        for (std::uint32_t i = 0; i < depth; ++i)
            workers.spawn(serve_requests(s, buffer(2 * i), buffer(2 * i + 1)));  // returns with its receive posted
        say("client " + peer + " connected; it may have " + std::to_string(depth) + " requests in flight");
    } catch (...) {
        s.failure = std::current_exception();
    }
    if (s.failure)
        co_await conn.close();  // ends the workers that did start
    co_await workers.join();
    co_await conn.close();  // usually the client closed already: then a no-op
    total.calls += s.calls;
    if (s.failure)
        say("client " + peer + " disconnected after " + std::to_string(s.calls) + " calls: " + describe(s.failure));
    else
        say("client " + peer + " left after " + std::to_string(s.calls) + " calls");
}

struct options {
    std::string address;
    std::uint32_t depth = 64;
    std::uint64_t clients = 0;                // 0: forever
    std::chrono::seconds accept_timeout{0};  // 0: wait as long as it takes
};

/// A token for one accept: stopped after `limit` (never, if it is 0), unless
/// the deadline is destroyed first. Event listener thread only: the timer is
/// the event listener's.
class accept_deadline {
public:
    accept_deadline(event_listener& events, std::chrono::seconds limit) {
        if (limit.count() > 0)
            timer_ = events.call_after(limit, [source = give_up_]() mutable { source.request_stop(); });
    }
    accept_deadline(const accept_deadline&) = delete;
    accept_deadline& operator=(const accept_deadline&) = delete;
    ~accept_deadline() {
        if (timer_)
            timer_->cancel();
    }

    std::stop_token token() const noexcept { return give_up_.get_token(); }

private:
    std::stop_source give_up_;
    std::shared_ptr<event_listener::timer> timer_;
};

task<totals> serve(listener l, std::shared_ptr<event_listener> events, std::shared_ptr<memory_pool> pool,
                   options opt) {
    const handler handler_fn = handle;
    totals total;
    task_group sessions;
    co_await events->schedule();  // from here on: the event listener thread, where its timers are set
    while (opt.clients == 0 || total.clients < opt.clients) {
        connection conn;
        try {
            accept_deadline deadline(*events, opt.accept_timeout);
            conn = co_await l.accept(deadline.token());
        } catch (const operation_cancelled&) {
            total.gave_up = true;  // no client came within --accept-timeout
            if (total.clients == 0)
                say("no client connected within " + std::to_string(opt.accept_timeout.count()) +
                    " s; is the client pointed at " + l.address() + "?");
            else
                say("no further client within " + std::to_string(opt.accept_timeout.count()) + " s" +
                    (opt.clients ? " (" + std::to_string(total.clients) + " of " + std::to_string(opt.clients) +
                                       " came)"
                                 : std::string()) +
                    "; exiting once the connected ones have left");
            break;
        } catch (const disconnected_error&) {
            break;  // the listener was closed
        } catch (const std::exception& e) {
            // One client's failed handshake (e.g. no memory for its queue
            // pair) is no reason to stop serving the others.
            say(std::string("accepting a client failed: ") + e.what());
            continue;
        }
        ++total.clients;
        sessions.spawn(session(conn, pool, opt.depth, handler_fn, total));
    }
    co_await sessions.join();
    // Only now: closing the listener refuses what it has not accepted yet,
    // and a client counts as connected only once its whole handshake is done.
    l.close();
    co_return total;
}

options parse_options(int argc, char** argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "--depth")
            opt.depth = static_cast<std::uint32_t>(rpc::parse_number(arg, i + 1 < argc ? argv[++i] : nullptr, 1, 1024));
        else if (arg == "--clients")
            opt.clients = rpc::parse_number(arg, i + 1 < argc ? argv[++i] : nullptr, 1, UINT64_MAX);
        else if (arg == "--accept-timeout")
            opt.accept_timeout = std::chrono::seconds(
                rpc::parse_number(arg, i + 1 < argc ? argv[++i] : nullptr, 1, 365 * 24 * 3600));
        else if (arg.starts_with("-"))
            throw rpc::usage_error("unknown option '" + std::string(arg) + "'");
        else if (opt.address.empty())
            opt.address = arg;
        else
            throw rpc::usage_error("one ADDRESS only, got '" + opt.address + "' and '" + std::string(arg) + "'");
    }
    if (opt.address.empty())
        throw rpc::usage_error("no ADDRESS to listen on");
    return opt;
}

}  // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        opt = parse_options(argc, argv);
    } catch (const rpc::usage_error& e) {
        std::fprintf(stderr, "rpc_server: %s\nusage: rpc_server ADDRESS [--depth N] [--clients N] [--accept-timeout S]\n", e.what());
        return 2;
    }
    try {
        builder b;
        // Each client's queue pair holds one receive and one send per credit.
        b.recv_queue_depth(opt.depth).send_queue_depth(opt.depth);
        listener l = b.listen(opt.address);
        say("listening on " + l.address() +
            (opt.clients ? "; exiting after " + std::to_string(opt.clients) + " client(s)" : std::string()));
        totals total = sync_wait(serve(l, b.event_listener(), b.pool(), opt));
        say("served " + std::to_string(total.clients) + " client(s), " + std::to_string(total.calls) + " calls");
        // Giving up is a failure only if clients were expected and did not come.
        return total.gave_up && opt.clients != 0 && total.clients < opt.clients ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_server: %s\n", e.what());
        return 1;
    }
}
