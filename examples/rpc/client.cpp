// rpc_client: makes pipelined calls to rpc_server (many in flight at once,
// each response matched to its call by id), checks every answer, and prints
// what it did and how many calls per second it achieved.
//
// Usage: rpc_client ADDRESS [--calls N] [--depth D]
//   ADDRESS    the server's "ip:port"
//   --calls N  how many calls to make (default 20000), cycling through
//              echo, add and upper
//   --depth D  calls kept in flight (default 16; the server's credits cap it)
//
// rpc_channel below is the reusable part: the client half of the pattern in
// protocol.hpp. Its call() is a coroutine any number of callers may use at
// once; it returns the response whose id matches its request.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/error.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "command_line.hpp"
#include "protocol.hpp"

using namespace cordma;

namespace {

struct reply {
    std::uint64_t id = 0;
    rpc::method op = rpc::method::hello;
    rpc::status code = rpc::status::ok;
    std::string payload;
};

/// The client side of one connection to an rpc server.
///
/// - start() posts depth + 1 receives, then calls hello for the server's
///   credits. Why one receive more than calls in flight: a receive loop that
///   gets a response resumes the waiting call before it posts its receive
///   again, and that call may send its next request at once; the spare
///   receive is there for that request's response.
/// - call() sends one request and resumes when the response with its id
///   arrives, on the event listener thread. At most `depth` calls (fewer if
///   the server grants fewer credits) are in flight; more callers wait their
///   turn, in order.
/// - close() disconnects and waits for the receive loops to end; call it
///   before the channel is destroyed (the task_group insists).
/// Listener thread only, like the connection's operations.
class rpc_channel {
public:
    /// Registers every buffer now, before connecting, so that start() posts
    /// the receives the moment the connection is up.
    rpc_channel(std::shared_ptr<memory_pool> pool, std::uint32_t depth)
        : depth_(depth),
          receive_buffers_(pool->allocate((std::size_t{depth} + 1) * rpc::max_message)),
          send_buffers_(pool->allocate(std::size_t{depth} * rpc::max_message)) {}
    rpc_channel(const rpc_channel&) = delete;
    rpc_channel& operator=(const rpc_channel&) = delete;

    /// Returns the server's credits; in_flight() says how many calls this
    /// channel will have outstanding: min(depth, credits).
    task<std::uint32_t> start(connection conn) {
        conn_ = std::move(conn);
        for (std::size_t i = 0; i <= depth_; ++i)
            receivers_.spawn(receive_loop(receive_buffers_.slice(i * rpc::max_message, rpc::max_message)));
        // Call 0 with the first send buffer: one request, which every server
        // has a receive for, before the credits are known.
        pending_call hello(0);
        pending_.emplace(0, &hello);
        reply greeting;
        std::exception_ptr failure;
        try {
            local_slice out = send_buffers_.slice(0, rpc::max_message);
            co_await conn_.send(out.slice(0, rpc::encode(out.bytes(), {.id = 0, .op = rpc::method::hello}, {})));
            greeting = co_await hello;
        } catch (...) {
            failure = std::current_exception();
        }
        pending_.erase(0);
        if (failure)
            std::rethrow_exception(failure);
        auto h = rpc::from_payload<rpc::hello>(greeting.payload);
        if (greeting.op != rpc::method::hello || !h || h->credits == 0)
            throw rpc::protocol_error("rpc: the server's answer to hello is not valid");
        if (h->max_message != rpc::max_message)
            throw rpc::protocol_error("rpc: the server's max_message is " + std::to_string(h->max_message) +
                                      ", ours " + std::to_string(rpc::max_message) + ": build both from one protocol.hpp");
        in_flight_ = std::min(depth_, h->credits);
        for (std::uint32_t i = 0; i < in_flight_; ++i)
            free_slots_.push_back(i);
        co_return h->credits;
    }

    std::uint32_t in_flight() const noexcept { return in_flight_; }

    /// Sends `payload` to `method` and yields the response (whatever its
    /// status). Throws std::length_error for a payload over rpc::max_payload,
    /// and the connection's error if it breaks before the response arrives.
    task<reply> call(rpc::method method, std::string_view payload) {
        std::uint32_t slot = co_await slot_wait(*this);  // a credit and its send buffer
        pending_call me(next_id_++);
        reply result;
        std::exception_ptr failure;
        try {
            local_slice out = send_buffers_.slice(std::size_t{slot} * rpc::max_message, rpc::max_message);
            std::size_t length = rpc::encode(out.bytes(), {.id = me.id, .op = method}, payload);
            // Registered before sending: the response may be delivered before
            // the send's own completion is.
            pending_.emplace(me.id, &me);
            co_await conn_.send(out.slice(0, length));
            result = co_await me;
        } catch (...) {
            failure = std::current_exception();
        }
        pending_.erase(me.id);
        release(slot);
        if (failure)
            std::rethrow_exception(failure);
        co_return result;
    }

    task<void> close() {
        closing_ = true;
        if (conn_ && !conn_.is_broken())
            co_await conn_.close();  // flushes the receives: the loops end
        co_await receivers_.join();
    }

private:
    /// A call waiting for its response; lives in call()'s frame.
    struct pending_call {
        explicit pending_call(std::uint64_t call_id) : id(call_id) {}

        std::uint64_t id;
        reply result;
        std::exception_ptr error;
        bool done = false;
        std::coroutine_handle<> waiter;

        void complete() {
            done = true;
            if (waiter)
                std::exchange(waiter, {}).resume();
        }
        bool await_ready() const noexcept { return done; }
        void await_suspend(std::coroutine_handle<> h) noexcept { waiter = h; }
        reply await_resume() {
            if (error)
                std::rethrow_exception(error);
            return std::move(result);
        }
    };

    /// Waits for a free slot (credit + send buffer), first come first served.
    struct slot_wait {
        explicit slot_wait(rpc_channel& c) : channel(c) {}

        rpc_channel& channel;
        std::uint32_t slot = 0;
        std::coroutine_handle<> waiter;

        bool await_ready() {
            if (channel.free_slots_.empty() || !channel.slot_waiters_.empty())
                return false;
            slot = channel.free_slots_.back();
            channel.free_slots_.pop_back();
            return true;
        }
        void await_suspend(std::coroutine_handle<> h) {
            waiter = h;
            channel.slot_waiters_.push_back(this);
        }
        std::uint32_t await_resume() const noexcept { return slot; }
    };

    void release(std::uint32_t slot) {
        if (slot_waiters_.empty()) {
            free_slots_.push_back(slot);
            return;
        }
        slot_wait* next = slot_waiters_.front();
        slot_waiters_.pop_front();
        next->slot = slot;
        next->waiter.resume();
    }

    /// One receive kept posted: every response that lands in it goes to the
    /// call with its id.
    task<void> receive_loop(local_slice buffer) {
        std::exception_ptr error;
        try {
            for (;;) {
                recv_result got = co_await conn_.recv(buffer);
                deliver(rpc::decode(buffer.bytes().first(got.length)));
            }
        } catch (const work_completion_error& e) {
            // A flushed receive we did not ask for: the server went away.
            if (e.status() == IBV_WC_WR_FLUSH_ERR && !closing_)
                error = std::make_exception_ptr(std::runtime_error(
                    "the connection to " + conn_.peer() + " went down (the server closed it or died): " + e.what()));
            else
                error = std::current_exception();
        } catch (...) {
            error = std::current_exception();
        }
        // Nothing more will arrive here: the connection is closed or broken,
        // or the server broke the protocol. Calls still waiting would wait
        // forever, so they fail with this error; then disconnect (a no-op if
        // the connection is already down), which ends the other loops.
        fail_all(error);
        if (!conn_.is_broken())
            co_await conn_.close();
    }

    void deliver(const rpc::message& m) {
        auto it = pending_.find(m.head.id);
        if (it == pending_.end())
            throw rpc::protocol_error("rpc: a response to call " + std::to_string(m.head.id) +
                                      ", which is not waiting for one");
        pending_call* call = it->second;
        pending_.erase(it);
        call->result = {.id = m.head.id, .op = m.head.op, .code = m.head.code, .payload = std::string(m.payload)};
        call->complete();  // the caller runs now, inline, until it next waits
    }

    void fail_all(const std::exception_ptr& error) {
        auto calls = std::exchange(pending_, {});
        for (auto& [id, call] : calls) {
            call->error = error;
            call->complete();
        }
    }

    connection conn_;
    std::uint32_t depth_;
    std::uint32_t in_flight_ = 0;
    local_mr receive_buffers_;
    local_mr send_buffers_;
    std::vector<std::uint32_t> free_slots_;
    std::deque<slot_wait*> slot_waiters_;
    std::unordered_map<std::uint64_t, pending_call*> pending_;
    std::uint64_t next_id_ = 1;  // 0 is the hello
    bool closing_ = false;
    task_group receivers_;
};

// ---------------------------------------------------------------------------
// The demo: what to call, how to check it, and the summary.

/// Call number n: its method, payload and the response payload it must get.
struct planned_call {
    rpc::method op;
    std::string payload;
    std::string expected;
};

planned_call plan(std::uint64_t n) {
    switch (n % 3) {
    case 0: {
        std::string text = "hello #" + std::to_string(n);
        return {rpc::method::echo, text, text};
    }
    case 1: {
        rpc::add_request r{.a = static_cast<std::int64_t>(n), .b = 1000};
        std::int64_t sum = r.a + r.b;
        return {rpc::method::add, std::string(rpc::as_payload(r)), std::string(rpc::as_payload(sum))};
    }
    default: {
        std::string text = "call #" + std::to_string(n) + " in upper case";
        std::string upper = text;
        std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
        return {rpc::method::upper, text, upper};
    }
    }
}

/// A payload as a person reads it.
std::string show(rpc::method op, std::string_view payload, bool response) {
    if (op == rpc::method::add) {
        if (auto r = rpc::from_payload<rpc::add_request>(payload); r && !response)
            return std::to_string(r->a) + " + " + std::to_string(r->b);
        if (auto sum = rpc::from_payload<std::int64_t>(payload); sum && response)
            return std::to_string(*sum);
    }
    return "\"" + std::string(payload) + "\"";
}

struct results {
    std::uint32_t in_flight = 0;
    std::uint64_t calls = 0;
    std::uint64_t errors = 0;
    std::string first_error;
    std::vector<std::string> samples = std::vector<std::string>(3);  // the first call of each method
    std::chrono::steady_clock::duration elapsed{};
    std::chrono::steady_clock::duration total_latency{};
};

void note_error(results& r, std::string what) {
    if (r.errors++ == 0)
        r.first_error = std::move(what);
}

/// Makes calls one after another until `total` have been made (by all
/// callers together); `depth` of these run at once.
task<void> caller(rpc_channel& channel, std::uint64_t& next, std::uint64_t total, results& r) {
    while (next < total) {
        std::uint64_t n = next++;
        planned_call p = plan(n);
        auto start = std::chrono::steady_clock::now();
        reply got;
        try {
            got = co_await channel.call(p.op, p.payload);
        } catch (const std::exception& e) {
            note_error(r, std::string("a call (") + rpc::to_string(p.op) + ") failed: " + e.what());
            co_return;  // the connection is gone; the other callers stop too
        }
        r.total_latency += std::chrono::steady_clock::now() - start;
        ++r.calls;
        if (got.code != rpc::status::ok || got.payload != p.expected) {
            note_error(r, "call " + std::to_string(got.id) + " (" + rpc::to_string(p.op) + " " +
                              show(p.op, p.payload, false) + ") got " + rpc::to_string(got.code) + " " +
                              show(p.op, got.payload, true) + ", expected " + show(p.op, p.expected, true));
            continue;
        }
        if (n < r.samples.size()) {
            char line[200];
            std::snprintf(line, sizeof line, "call %-3llu %-6s %-30s -> %s", static_cast<unsigned long long>(got.id),
                          rpc::to_string(p.op), show(p.op, p.payload, false).c_str(),
                          show(p.op, got.payload, true).c_str());
            r.samples[n] = line;
        }
    }
}

struct options {
    std::string address;
    std::uint64_t calls = 20000;
    std::uint32_t depth = 16;
};

void print_summary(const results& r, const options& opt) {
    for (const auto& line : r.samples)
        if (!line.empty())
            std::printf("  %s\n", line.c_str());
    double seconds = std::chrono::duration<double>(r.elapsed).count();
    double latency_us =
        r.calls ? std::chrono::duration<double, std::micro>(r.total_latency).count() / double(r.calls) : 0;
    std::printf("rpc_client: %llu of %llu calls made, %llu errors, %.3f s: %.0f calls/s, "
                "mean latency %.0f us at %u in flight\n",
                static_cast<unsigned long long>(r.calls), static_cast<unsigned long long>(opt.calls),
                static_cast<unsigned long long>(r.errors), seconds, seconds > 0 ? double(r.calls) / seconds : 0.0,
                latency_us, r.in_flight);
    if (r.errors)
        std::printf("rpc_client: first error: %s\n", r.first_error.c_str());
}

task<results> run(builder& b, const options& opt) {
    results r;
    rpc_channel channel(b.pool(), opt.depth);
    // From here on this coroutine runs on the event listener thread.
    connection conn = co_await b.connect(opt.address);
    std::exception_ptr failure;
    try {
        std::uint32_t credits = co_await channel.start(conn);
        r.in_flight = channel.in_flight();
        std::printf("rpc_client: connected to %s; the server grants %u calls in flight, using %u\n",
                    conn.peer().c_str(), credits, r.in_flight);
        // A method the server does not have must get a clean error, not a
        // dropped connection.
        reply unknown = co_await channel.call(static_cast<rpc::method>(99), "?");
        if (unknown.code == rpc::status::unknown_method)
            std::printf("rpc_client: call %llu to method 99 answered \"%s\", as it should\n",
                        static_cast<unsigned long long>(unknown.id), rpc::to_string(unknown.code));
        else
            note_error(r, std::string("method 99 answered ") + rpc::to_string(unknown.code) +
                              ", expected \"unknown method\"");

        std::uint64_t next = 0;
        std::vector<task<void>> callers;
        for (std::uint32_t i = 0; i < opt.depth; ++i)
            callers.push_back(caller(channel, next, opt.calls, r));
        auto start = std::chrono::steady_clock::now();
        co_await when_all(std::move(callers));
        r.elapsed = std::chrono::steady_clock::now() - start;
        print_summary(r, opt);  // before closing, so it comes before the server notices
    } catch (...) {
        failure = std::current_exception();
    }
    co_await channel.close();
    if (failure)
        std::rethrow_exception(failure);
    co_return r;
}

options parse_options(int argc, char** argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "--calls")
            opt.calls = rpc::parse_number(arg, i + 1 < argc ? argv[++i] : nullptr, 1, 1'000'000'000);
        else if (arg == "--depth")
            opt.depth = static_cast<std::uint32_t>(rpc::parse_number(arg, i + 1 < argc ? argv[++i] : nullptr, 1, 1024));
        else if (arg.starts_with("-"))
            throw rpc::usage_error("unknown option '" + std::string(arg) + "'");
        else if (opt.address.empty())
            opt.address = arg;
        else
            throw rpc::usage_error("one ADDRESS only, got '" + opt.address + "' and '" + std::string(arg) + "'");
    }
    if (opt.address.empty())
        throw rpc::usage_error("no server ADDRESS");
    return opt;
}

}  // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        opt = parse_options(argc, argv);
    } catch (const rpc::usage_error& e) {
        std::fprintf(stderr, "rpc_client: %s\nusage: rpc_client ADDRESS [--calls N] [--depth D]\n", e.what());
        return 2;
    }
    // Line by line, also into a pipe: the demo interleaves us with the server.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        builder b;
        // A send per call in flight, and one receive more (see rpc_channel).
        b.send_queue_depth(opt.depth).recv_queue_depth(opt.depth + 1);
        results r = sync_wait(run(b, opt));
        return r.errors == 0 && r.calls == opt.calls ? 0 : 1;
    } catch (const std::system_error& e) {
        std::fprintf(stderr, "rpc_client: %s\n", e.what());
        if (e.code() == std::errc::connection_refused)
            std::fprintf(stderr, "rpc_client: is rpc_server running and listening on %s?\n", opt.address.c_str());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_client: %s\n", e.what());
        return 1;
    }
}
