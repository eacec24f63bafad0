// cordma::rpc in the classic, blocking shape (cordma/rpc_blocking.hpp) over
// real rxe connections: a handler object and per-method functions, every
// response checked; a handler that blocks while other clients' calls
// complete; handlers inline on the event listener as the opt-in; run()
// ended by stop() from another thread, from a handler, and by SIGTERM and
// SIGINT, with the previous signal handlers restored; call timeouts; the
// rpc::server construction order enforced with an error naming the fix; a
// trace id from call_options read by the handlers (current_trace()); and
// the errors a user can run into.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/rpc.hpp>
#include <cordma/rpc_blocking.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/trace.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::test_builder;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// Answers "<method>:<request>"; method 7 throws; method 8 blocks until
/// `release` (at most 20 s), saying it started in `entered`.
class recording_handler : public rpc::blocking_handler {
public:
    std::vector<std::byte> handle(std::uint32_t method, std::span<const std::byte> request) override {
        if (method == 7)
            throw std::runtime_error("method 7 always fails");
        if (method == 8) {
            entered = true;
            auto until = clock_type::now() + 20s;
            while (!release && clock_type::now() < until)
                std::this_thread::sleep_for(1ms);
        }
        calls.fetch_add(1);
        {
            std::lock_guard lock(mutex);
            seen = rpc::current_trace();
        }
        return rpc::bytes_of(std::to_string(method) + ":" + rpc::text_of(request));
    }
    /// The trace id the last call's handler saw.
    trace_id last_trace() {
        std::lock_guard lock(mutex);
        return seen;
    }
    std::atomic<bool> entered{false};
    std::atomic<bool> release{false};
    std::atomic<int> calls{0};
    std::mutex mutex;
    trace_id seen{};
};

/// run() on a thread of its own, stopped and joined at the end of the scope.
class running {
public:
    explicit running(rpc::blocking_server& s) : server_(s) {
        thread_ = std::thread([this] {
            try {
                server_.run();
                returned_.set_value();
            } catch (...) {
                returned_.set_exception(std::current_exception());
            }
        });
    }
    ~running() {
        server_.stop();
        thread_.join();
    }
    /// Whether run() returned within `limit` (rethrowing what it threw).
    bool returned_within(std::chrono::milliseconds limit) {
        if (future_.wait_for(limit) != std::future_status::ready)
            return false;
        future_.get();
        return true;
    }

private:
    rpc::blocking_server& server_;
    std::promise<void> returned_;
    std::future<void> future_ = returned_.get_future();
    std::thread thread_;
};

std::string payload(std::size_t n, char seed) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i)
        s[i] = static_cast<char>('a' + (seed + i * 7) % 26);
    return s;
}

}  // namespace

TEST_CASE("a handler object and per-method functions answer calls, every byte checked", "[rpc_blocking]") {
    recording_handler h;
    rpc::blocking_server s(test_builder(), any_port(), h);
    s.handle(2, "shout", [](std::span<const std::byte> r) {
        std::string t = rpc::text_of(r);
        for (char& c : t)
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return rpc::bytes_of(t);
    });
    s.handle(3, "trace", [](std::span<const std::byte>) { return rpc::bytes_of(rpc::current_trace().to_string()); });
    REQUIRE(s.address().starts_with(test::test_address() + ":"));
    REQUIRE(s.address() != test::test_address() + ":0");
    running r(s);

    rpc::blocking_client c(test_builder());
    REQUIRE_FALSE(c.connected());
    c.connect(s.address());
    REQUIRE(c.connected());
    REQUIRE(c.peer() == s.address());
    CHECK(c.call(1, "world") == "1:world");
    CHECK(c.call(2, "world") == "WORLD");  // its own function, not the handler object
    CHECK(c.call(12345, "") == "12345:");
    for (std::size_t n : {1ul, 4000ul, 4096ul, 10'000ul, 300'000ul}) {  // across the eager size
        std::string p = payload(n, static_cast<char>(n % 26));
        std::vector<std::byte> back = c.call(1, rpc::bytes_of(p));
        CHECK(rpc::text_of(back) == "1:" + p);
    }
    CHECK(h.calls.load() == 7);

    try {
        (void)c.call(7, "x");
        FAIL("a handler that throws fails its call");
    } catch (const rpc::rpc_error& e) {
        CHECK(e.errc() == rpc::rpc_errc::handler_failed);
        CHECK(std::string(e.what()).find("method 7 always fails") != std::string::npos);
    }
    CHECK(c.call(1, "after") == "1:after");  // the server goes on

    // A trace id travels with a call given call_options: the handler object
    // and a per-method function read it with current_trace(); an untraced
    // call's handler, and code outside any handler, read none.
    const trace_id t = trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736").value();
    CHECK(rpc::text_of(c.call(1, rpc::bytes_of("traced"), rpc::call_options{.trace = t})) == "1:traced");
    CHECK(h.last_trace() == t);
    CHECK(rpc::text_of(c.call(3, rpc::bytes_of(""), rpc::call_options{.trace = t})) == t.to_string());
    CHECK(c.call(1, "untraced") == "1:untraced");
    CHECK(h.last_trace().empty());
    CHECK(c.call(3, "").empty());
    CHECK(rpc::current_trace().empty());
    CHECK_THROWS_WITH(c.call(1, rpc::bytes_of("x"), rpc::call_options{.deadline = -1ms}),
                      Catch::Contains("call_options::deadline is negative"));

    c.close();
    REQUIRE_FALSE(c.connected());
    c.connect(s.address());  // again, after close
    CHECK(c.call(1, "again") == "1:again");
}

TEST_CASE("a handler that blocks delays only its own call: other clients' calls complete meanwhile",
          "[rpc_blocking]") {
    recording_handler h;
    rpc::blocking_server s(test_builder(), any_port(), h, {.threads = 2});
    running r(s);

    std::promise<std::string> slow_answer;
    auto slow_future = slow_answer.get_future();
    std::jthread slow([&] {
        try {
            rpc::blocking_client a(test_builder());
            a.connect(s.address());
            slow_answer.set_value(a.call(8, "slow"));
        } catch (...) {
            slow_answer.set_exception(std::current_exception());
        }
    });
    // Whatever fails below, the blocked handler is let go before `slow` is
    // joined (locals are destroyed in reverse).
    struct releaser {
        std::atomic<bool>& release;
        ~releaser() { release = true; }
    } let_go{h.release};
    auto until = clock_type::now() + 20s;
    while (!h.entered && clock_type::now() < until)
        std::this_thread::sleep_for(1ms);
    REQUIRE(h.entered);

    rpc::blocking_client b(test_builder());
    b.connect(s.address());
    auto start = clock_type::now();
    for (int i = 0; i < 50; ++i) {
        std::string p = payload(static_cast<std::size_t>(i) * 97, static_cast<char>(i));
        REQUIRE(b.call(1, p) == "1:" + p);
    }
    INFO("50 calls took " << std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count()
                          << " ms while the other handler blocked");
    CHECK(slow_future.wait_for(0s) == std::future_status::timeout);  // still blocked, on its own thread
    h.release = true;
    REQUIRE(slow_future.wait_for(20s) == std::future_status::ready);
    CHECK(slow_future.get() == "8:slow");
}

TEST_CASE("threads = 0 runs handlers inline on the event listener thread; the default, on the server's threads",
          "[rpc_blocking]") {
    for (std::size_t threads : {0ul, 4ul}) {
        builder b = test_builder();
        std::shared_ptr<event_listener> el = b.event_listener();
        rpc::blocking_server s(b, any_port(), {.threads = threads});
        s.handle(1, "where", [el](std::span<const std::byte>) {
            return rpc::bytes_of(el->running_in_this_thread() ? "event listener" : "another thread");
        });
        running r(s);
        rpc::blocking_client c(test_builder());
        c.connect(s.address());
        CHECK(c.call(1, "") == (threads == 0 ? "event listener" : "another thread"));
    }
}

TEST_CASE("stop() ends run() from another thread, from a handler, and before run()", "[rpc_blocking]") {
    SECTION("from another thread, once a call was answered") {
        recording_handler h;
        rpc::blocking_server s(test_builder(), any_port(), h);
        running r(s);
        rpc::blocking_client c(test_builder());
        c.connect(s.address());
        CHECK(c.call(1, "x") == "1:x");
        CHECK_FALSE(r.returned_within(100ms));
        s.stop();
        REQUIRE(r.returned_within(20s));
        CHECK(s.stopped_by_signal() == 0);
        CHECK_THROWS_AS(s.run(), std::logic_error);  // once only
    }
    SECTION("from a handler: its caller gets its answer") {
        rpc::blocking_server s(test_builder(), any_port());
        s.handle(9, "bye", [&s](std::span<const std::byte>) {
            s.stop();
            return rpc::bytes_of("bye");
        });
        running r(s);
        rpc::blocking_client c(test_builder());
        c.connect(s.address());
        CHECK(c.call(9, "") == "bye");
        REQUIRE(r.returned_within(20s));
    }
    SECTION("before run(): run() returns at once") {
        rpc::blocking_server s(test_builder(), any_port());
        s.stop();
        auto start = clock_type::now();
        s.run();
        CHECK(clock_type::now() - start < 5s);
    }
}

namespace {
std::atomic<int> test_handler_calls{0};
extern "C" void test_handler(int) { test_handler_calls.fetch_add(1); }

void (*current_handler(int signal))(int) {
    struct sigaction now {};
    sigaction(signal, nullptr, &now);
    return now.sa_handler;
}

/// Waits (at most 20 s) until run() has replaced `signal`'s handler.
bool wait_installed(int signal, void (*before)(int)) {
    auto until = clock_type::now() + 20s;
    while (current_handler(signal) == before && clock_type::now() < until)
        std::this_thread::sleep_for(1ms);
    return current_handler(signal) != before;
}
}  // namespace

TEST_CASE("SIGTERM and SIGINT end run(); the handlers from before come back; SIG_IGN stays", "[rpc_blocking]") {
    struct sigaction mine {};
    mine.sa_handler = test_handler;
    sigemptyset(&mine.sa_mask);
    struct sigaction old_term {}, old_int {};
    REQUIRE(sigaction(SIGTERM, &mine, &old_term) == 0);
    REQUIRE(sigaction(SIGINT, &mine, &old_int) == 0);
    test_handler_calls = 0;

    for (int signal : {SIGTERM, SIGINT}) {
        CAPTURE(signal);
        recording_handler h;
        rpc::blocking_server s(test_builder(), any_port(), h);
        running r(s);
        REQUIRE(wait_installed(signal, test_handler));
        rpc::blocking_client c(test_builder());
        c.connect(s.address());
        CHECK(c.call(1, "before the signal") == "1:before the signal");
        REQUIRE(kill(getpid(), signal) == 0);
        REQUIRE(r.returned_within(20s));
        CHECK(s.stopped_by_signal() == signal);
        CHECK(current_handler(SIGTERM) == test_handler);
        CHECK(current_handler(SIGINT) == test_handler);
        CHECK(test_handler_calls.load() == 0);
    }

    SECTION("a signal ignored before run() stays ignored; SIGTERM still stops it") {
        REQUIRE(signal(SIGINT, SIG_IGN) != SIG_ERR);
        rpc::blocking_server s(test_builder(), any_port());
        running r(s);
        REQUIRE(wait_installed(SIGTERM, test_handler));
        CHECK(current_handler(SIGINT) == SIG_IGN);
        REQUIRE(kill(getpid(), SIGINT) == 0);  // ignored
        CHECK_FALSE(r.returned_within(200ms));
        REQUIRE(kill(getpid(), SIGTERM) == 0);
        REQUIRE(r.returned_within(20s));
        CHECK(s.stopped_by_signal() == SIGTERM);
        CHECK(current_handler(SIGINT) == SIG_IGN);
    }
    SECTION("handle_signals = false leaves the handlers alone; one run() at a time may handle them") {
        rpc::blocking_server quiet(test_builder(), any_port(), {.handle_signals = false});
        quiet.handle(1, "echo", [](std::span<const std::byte> r) { return std::vector<std::byte>(r.begin(), r.end()); });
        running q(quiet);
        rpc::blocking_client c(test_builder());
        c.connect(quiet.address());
        CHECK(c.call(1, "quiet") == "quiet");  // answered: its run() runs
        CHECK(current_handler(SIGTERM) == test_handler);
        CHECK(current_handler(SIGINT) == test_handler);

        rpc::blocking_server first(test_builder(), any_port());
        rpc::blocking_server second(test_builder(), any_port());
        running r(first);
        REQUIRE(wait_installed(SIGTERM, test_handler));
        running r2(second);
        CHECK_THROWS_AS(r2.returned_within(20s), std::logic_error);
        REQUIRE(kill(getpid(), SIGTERM) == 0);
        REQUIRE(r.returned_within(20s));
        CHECK(first.stopped_by_signal() == SIGTERM);
        CHECK_FALSE(q.returned_within(100ms));  // the quiet one serves on
        CHECK(c.call(1, "still") == "still");
    }

    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
}

TEST_CASE("a call's timeout ends it with timed_out; the client goes on", "[rpc_blocking]") {
    rpc::blocking_server s(test_builder(), any_port());
    s.handle(3, "slow", [](std::span<const std::byte> r) {
        std::this_thread::sleep_for(1500ms);
        return std::vector<std::byte>(r.begin(), r.end());
    });
    s.handle(1, "echo", [](std::span<const std::byte> r) { return std::vector<std::byte>(r.begin(), r.end()); });
    running r(s);

    rpc::blocking_client c(test_builder(), {.timeout = 300ms});
    c.connect(s.address());
    for (bool own_timeout : {false, true}) {
        auto start = clock_type::now();
        try {
            if (own_timeout)
                (void)c.call(3, "late", 200ms);
            else
                (void)c.call(3, "late");
            FAIL("the call outlived its timeout");
        } catch (const rpc::rpc_error& e) {
            CHECK(e.errc() == rpc::rpc_errc::timed_out);
            CHECK(e.code() == std::errc::timed_out);
        }
        CHECK(clock_type::now() - start < 1200ms);
    }
    CHECK(c.call(1, "still here", 10s) == "still here");
    CHECK_THROWS_AS(c.call(1, "x", 0ms), std::invalid_argument);
}

TEST_CASE("rpc::server: a listener made before it fails serve() at once, naming the cause and the fix",
          "[rpc_blocking]") {
    builder b = test_builder();
    listener early = b.listen(any_port());
    rpc::server server(b);
    try {
        sync_wait(server.serve(early));
        FAIL("serve() took a listener made before the server");
    } catch (const std::logic_error& e) {
        std::string what = e.what();
        CHECK(what.find("made before this server") != std::string::npos);
        CHECK(what.find("make the rpc::server first, then listen") != std::string::npos);
    }
    // The other order serves.
    listener late = b.listen(any_port());
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(late, stop.get_token())); });
    {
        rpc::blocking_client c(test_builder());
        c.connect(late.address());
        CHECK(c.call(1, "in order") == "in order");
    }
    stop.request_stop();
    serving.join();
}

TEST_CASE("errors a user can run into name their cause", "[rpc_blocking]") {
    rpc::blocking_client c(test_builder());
    CHECK_THROWS_AS(c.call(1, "x"), std::logic_error);  // not connected
    CHECK_THROWS_AS(rpc::blocking_client(test_builder(), {.timeout = 0ms}), std::invalid_argument);
    CHECK_THROWS_AS(rpc::blocking_server(test_builder(), any_port(), {.threads = 1000}),
                    std::invalid_argument);
    rpc::blocking_server_options with_executor;
    with_executor.rpc.executor = [](std::function<void()> f) { f(); };
    CHECK_THROWS_AS(rpc::blocking_server(test_builder(), any_port(), with_executor), std::invalid_argument);

    std::string gone;
    {
        rpc::blocking_server s(test_builder(), any_port());
        CHECK_THROWS_AS(s.handle(1, "empty", rpc::blocking_function{}), std::invalid_argument);
        s.handle(1, "echo", [](std::span<const std::byte> r) { return std::vector<std::byte>(r.begin(), r.end()); });
        CHECK_THROWS_AS(s.handle(1, "again", [](std::span<const std::byte>) { return std::vector<std::byte>{}; }),
                        std::invalid_argument);
        running r(s);
        c.connect(s.address());
        CHECK_THROWS_AS(c.connect(s.address()), std::logic_error);  // connected already
        try {
            (void)c.call(2, "x");  // no handler object: only the registered methods
            FAIL("an unknown method was answered");
        } catch (const rpc::rpc_error& e) {
            CHECK(e.errc() == rpc::rpc_errc::unknown_method);
        }
        CHECK(c.call(1, "x") == "x");
        gone = s.address();
    }
    // The server is gone: the call fails, and so does connecting again.
    CHECK_THROWS_AS(c.call(1, "x", 10s), rpc::rpc_error);
    c.close();
    rpc::blocking_client late(test_builder(), {.connect_timeout = 300ms});
    CHECK_THROWS_AS(late.connect(gone), std::system_error);
}
