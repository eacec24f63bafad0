// cordma::rpc over real rxe connections: 64 clients with pipelined calls,
// every response checked, all through one SRQ (shown by each server QP's
// attributes); sizes across the eager threshold up to 64 MiB both ways;
// every error case reaching its call (unknown method, a handler that
// throws, too large either way, a malformed frame closing only its
// client); deadlines and stop tokens; a client process killed mid-call; a
// server that dies, as a process or by going silent; handlers on an
// executor; the fallback to a receive queue per client, over the TCP
// exchange; the typed and blocking calls.

#include <infiniband/verbs.h>

#include <asio/post.hpp>
#include <asio/thread_pool.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"
#include "support/deadline.hpp"
#include "support/peer_process.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::test_builder;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// Byte i of the payload with `seed`: no chunking or misplacement can fake it.
std::byte pattern(std::uint64_t seed, std::size_t i) {
    return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 12) * 13) & 0xff);
}

std::vector<std::byte> payload(std::uint64_t seed, std::size_t size) {
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; ++i)
        out[i] = pattern(seed, i);
    return out;
}

bool matches(std::span<const std::byte> bytes, std::uint64_t seed) {
    for (std::size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] != pattern(seed, i))
            return false;
    return true;
}

// Trivially destructible: g++ 12 destroys a braced temporary awaiter twice
// in some coroutines.
struct sleep_for {
    event_listener* listener;
    std::chrono::milliseconds delay;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { listener->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

/// A request of method 2 ("shape"): the response's size and seed, then
/// the request's own seed; the rest of the request is its pattern, which
/// the handler checks.
struct shape {
    std::uint64_t response_size;
    std::uint64_t response_seed;
    std::uint64_t request_seed;
};

std::vector<std::byte> shape_request(std::size_t request_size, std::uint64_t request_seed,
                                     std::uint64_t response_size, std::uint64_t response_seed) {
    std::vector<std::byte> r = payload(request_seed, std::max(request_size, sizeof(shape)));
    shape s{response_size, response_seed, request_seed};
    std::memcpy(r.data(), &s, sizeof s);
    return r;
}

/// An error message of 1,500 characters, longer than a client's small
/// receives, its end marked.
std::string long_error() {
    std::string text = "a long failure:";
    for (int i = 0; text.size() < 1490; ++i)
        text += " " + std::to_string(i);
    return text + " (the end)";
}

/// The handlers every server here has: 1 echo, 2 shape, 3 slow (answers
/// after the milliseconds in its request), 4 fails (throws), 5 fails with
/// long_error(); through handle_into, 6 echo in place and 7 overclaims
/// (says it wrote one byte more than its reply holds).
void add_handlers(rpc::server& server, std::shared_ptr<event_listener> listener) {
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    server.handle(2, "shape", [](rpc::request r) -> task<std::vector<std::byte>> {
        if (r.bytes().size() < sizeof(shape))
            throw std::invalid_argument("shape: a request of " + std::to_string(r.bytes().size()) + " bytes");
        shape s;
        std::memcpy(&s, r.bytes().data(), sizeof s);
        auto rest = r.bytes().subspan(sizeof s);
        for (std::size_t i = 0; i < rest.size(); ++i)
            if (rest[i] != pattern(s.request_seed, i + sizeof s))
                throw std::runtime_error("shape: request byte " + std::to_string(i + sizeof s) + " is wrong");
        co_return payload(s.response_seed, s.response_size);
    });
    server.handle(3, "slow", [listener](rpc::request r) -> task<std::vector<std::byte>> {
        std::uint32_t ms = 0;
        std::memcpy(&ms, r.bytes().data(), std::min(r.bytes().size(), sizeof ms));
        co_await sleep_for{listener.get(), std::chrono::milliseconds(ms)};
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    server.handle(4, "fails", [](rpc::request) -> task<std::vector<std::byte>> {
        throw std::runtime_error("the disk is on fire");
        co_return std::vector<std::byte>{};
    });
    server.handle(5, "fails at length", [](rpc::request) -> task<std::vector<std::byte>> {
        throw std::runtime_error(long_error());
        co_return std::vector<std::byte>{};
    });
    server.handle_into(6, "echo in place", [](rpc::request r, std::span<std::byte> reply) -> task<std::size_t> {
        if (r.bytes().size() > reply.size())
            throw std::length_error("echo in place: " + std::to_string(r.bytes().size()) + " bytes, reply holds " +
                                    std::to_string(reply.size()));
        if (!r.bytes().empty())
            std::memcpy(reply.data(), r.bytes().data(), r.bytes().size());
        co_return r.bytes().size();
    });
    server.handle_into(7, "overclaims", [](rpc::request, std::span<std::byte> reply) -> task<std::size_t> {
        co_return reply.size() + 1;
    });
}

std::vector<std::byte> slow_request(std::uint32_t ms) {
    std::vector<std::byte> r(sizeof ms);
    std::memcpy(r.data(), &ms, sizeof ms);
    return r;
}

/// A server on its own builder (its own event listener thread), serving
/// until the fixture is destroyed.
struct running_server {
    builder b = test_builder();
    rpc::server server;
    listener l;
    std::stop_source stop;
    std::thread thread;

    explicit running_server(rpc::server_options options = {}, endpoint_exchange how = endpoint_exchange::rdma_cm,
                            const std::function<void(builder&)>& tune = {})
        : server(configure(b, how, tune), std::move(options)) {
        add_handlers(server, b.event_listener());
        l = b.listen(any_port());
        thread = std::thread([this] { sync_wait(server.serve(l, stop.get_token())); });
    }
    static builder& configure(builder& b, endpoint_exchange how, const std::function<void(builder&)>& tune) {
        b.exchange(how);
        if (tune)
            tune(b);
        // many_clients connects its clients all at once: under
        // AddressSanitizer on a loaded host, 64 handshakes may take longer
        // than the default 10 s each side allows.
        b.connect_timeout(60s);
        return b;
    }
    ~running_server() {
        stop.request_stop();
        thread.join();
    }
    std::string address() const { return l.address(); }
};

rpc::rpc_errc errc_of(const std::function<void()>& f, std::string* message = nullptr) {
    try {
        f();
    } catch (const rpc::rpc_error& e) {
        if (message != nullptr)
            *message = e.what();
        return e.errc();
    }
    FAIL("no rpc_error was thrown");
    return {};
}

task<void> echo_lane(rpc::client* c, int index, int* next, int calls, std::atomic<int>* wrong,
                     std::atomic<int>* answered) {
    while (*next < calls) {
        int k = (*next)++;
        std::uint64_t seed = std::uint64_t(index) * 100'000 + k;
        std::size_t size = 8 + (seed * 37) % 3000;
        std::vector<std::byte> request = payload(seed, size);
        std::vector<std::byte> response = co_await c->call(1, request);
        if (response != request)
            ++*wrong;
        ++*answered;
    }
}

task<void> pipelined_client(rpc::client* c, int index, int calls, int depth, std::atomic<int>* wrong,
                            std::atomic<int>* answered) {
    int next = 0;
    task_group lanes;
    for (int lane = 0; lane < depth; ++lane)
        lanes.spawn(echo_lane(c, index, &next, calls, wrong, answered));
    co_await lanes.join();
    co_await c->close();
}

task<void> connect_one(builder b, std::string address, rpc::client* out) {
    *out = co_await rpc::client::connect(b, address);
}

/// `clients` clients, all connecting at once (a burst the listener takes
/// whole: it answers each as it arrives), then all calling at once.
task<void> many_clients(builder b, std::string address, int clients, int calls, int depth, std::atomic<int>* wrong,
                        std::atomic<int>* answered) {
    std::vector<rpc::client> connected(static_cast<std::size_t>(clients));
    {
        task_group g;
        for (int i = 0; i < clients; ++i)
            g.spawn(connect_one(b, address, &connected[static_cast<std::size_t>(i)]));
        co_await g.join();
    }
    task_group all;
    for (int i = 0; i < clients; ++i)
        all.spawn(pipelined_client(&connected[static_cast<std::size_t>(i)], i, calls, depth, wrong, answered));
    co_await all.join();
}

/// A call of method 2 with a request of `request_size` and a response of
/// `response_size`; counts the responses that are right.
task<void> shaped_call(rpc::client* c, std::uint64_t seed, std::size_t request_size, std::size_t response_size,
                       std::atomic<int>* right) {
    std::vector<std::byte> request = shape_request(request_size, seed, response_size, seed + 1);
    std::vector<std::byte> response = co_await c->call(2, request);
    if (response.size() == response_size && matches(response, seed + 1))
        ++*right;
}

/// A call of method 3 (slow, `ms`); counts it in `ok` if it answered, in
/// `gone` if it failed with server_gone.
task<void> slow_call(rpc::client* c, std::uint32_t ms, std::atomic<int>* ok, std::atomic<int>* gone) {
    std::vector<std::byte> request = slow_request(ms);
    try {
        std::vector<std::byte> r = co_await c->call(3, request);
        if (r == request)
            ++*ok;
    } catch (const rpc::rpc_error& e) {
        if (e.errc() == rpc::rpc_errc::server_gone)
            ++*gone;
    }
}

task<void> slow_calls(rpc::client* c, int n, std::uint32_t ms, std::atomic<int>* ok, std::atomic<int>* gone) {
    task_group g;
    for (int i = 0; i < n; ++i)
        g.spawn(slow_call(c, ms, ok, gone));
    co_await g.join();
}

task<void> fast_calls(rpc::client* c, int n, std::atomic<int>* right, clock_type::duration* took) {
    auto start = clock_type::now();
    for (int i = 0; i < n; ++i) {
        std::vector<std::byte> request = payload(i, 64);
        std::vector<std::byte> r = co_await c->call(1, request);
        if (matches(r, i))
            ++*right;
    }
    *took = clock_type::now() - start;
}

task<void> blocking_and_fast(rpc::client* c, std::atomic<int>* right, clock_type::duration* took) {
    std::atomic<int> ok{0}, gone{0};
    task_group g;
    g.spawn(slow_call(c, 1, &ok, &gone));  // 4 bytes: the blocking handler sleeps on it
    g.spawn(fast_calls(c, 20, right, took));
    co_await g.join();
    if (ok == 1)
        ++*right;
}

}  // namespace

TEST_CASE("64 clients with 8 calls each in flight, every response checked, through one SRQ", "[rpc]") {
    running_server s({.receives = 512, .credits = 8});
    builder cb = test_builder();
    cb.connect_timeout(60s);  // see running_server
    constexpr int clients = 64, calls = 200, depth = 8;
    std::atomic<int> wrong{0}, answered{0};
    auto start = clock_type::now();
    sync_wait(many_clients(cb, s.address(), clients, calls, depth, &wrong, &answered));
    double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    WARN(clients * calls << " calls from " << clients << " clients in " << seconds << " s");
    CHECK(wrong == 0);
    CHECK(answered == clients * calls);
}

TEST_CASE("a client's receives are posted before the server may send: no receiver-not-ready NAK, 32 at once",
          "[rpc]") {
    // The server sends each client its credits as soon as it sees the
    // connection established. With rnr_retry 0 a credit frame that found
    // the client's receives not yet posted would fail at once and close
    // that client; the client posts them before it says it is connected
    // (before rdma_establish's RTU, or the TCP exchange's ready byte).
    // Over rdma_cm into the server's SRQ, over the TCP exchange into a
    // receive queue per client.
    auto [how, shared] = GENERATE(std::pair{endpoint_exchange::rdma_cm, true}, std::pair{endpoint_exchange::tcp, false});
    CAPTURE(how == endpoint_exchange::tcp ? "tcp" : "rdma_cm", shared);
    running_server s({.credits = 4, .shared_receives = shared}, how, [](builder& b) { b.rnr_retry(0); });
    builder cb = test_builder();
    cb.exchange(how);
    cb.connect_timeout(60s);  // see running_server
    std::atomic<int> wrong{0}, answered{0};
    sync_wait(many_clients(cb, s.address(), 32, 10, 2, &wrong, &answered));
    CHECK(wrong == 0);
    CHECK(answered == 320);
}

TEST_CASE("every server connection receives through the server's one SRQ", "[rpc]") {
    running_server s({.receives = 64, .credits = 4});
    builder cb = test_builder();
    std::vector<rpc::client> clients;
    for (int i = 0; i < 6; ++i)
        clients.push_back(sync_wait(rpc::client::connect(cb, s.address())));
    REQUIRE(s.server.shared_receive_queue() != nullptr);
    // A client counts once the server has taken it from accept().
    auto until = clock_type::now() + 10s;
    while (s.server.clients() < clients.size() && clock_type::now() < until)
        std::this_thread::yield();
    auto conns = s.server.connections();
    REQUIRE(conns.size() == clients.size());
    for (auto& conn : conns) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        REQUIRE(ibv_query_qp(conn.qp()->native_handle(), &attr, IBV_QP_STATE, &init) == 0);
        CHECK(init.srq == s.server.shared_receive_queue());
        CHECK(attr.qp_state == IBV_QPS_RTS);
    }
    for (auto& c : clients) {
        CHECK(c.credits() == 4);
        auto r = c.call_sync(1, payload(9, 100));
        CHECK(matches(r, 9));
    }
}

TEST_CASE("sizes across the eager threshold up to 64 MiB, both ways, every byte checked", "[rpc]") {
    running_server s;  // eager_size 4096
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    // Under ASan the largest is 16 MiB (the same rendezvous path; the plain
    // build runs 64 MiB): checking 64 MiB patterns took it 15 s of CI time.
#if defined(__SANITIZE_ADDRESS__)
    std::vector<std::size_t> sizes = {0, 1, 100, 4095, 4096, 4097, 65536, 1 << 20, 16 << 20};
#else
    std::vector<std::size_t> sizes = {0, 1, 100, 4095, 4096, 4097, 65536, 1 << 20, 64 << 20};
#endif
    std::uint64_t seed = 1;
    for (std::size_t size : sizes) {
        INFO("size " << size);
        // A request of `size` bytes (at least the 24-byte shape) and a small response.
        auto small_answer = c.call_sync(2, shape_request(size, seed, 16, seed + 1));
        CHECK(small_answer.size() == 16);
        CHECK(matches(small_answer, seed + 1));
        // A small request and a response of `size` bytes.
        auto answer = c.call_sync(2, shape_request(0, seed + 2, size, seed + 3));
        REQUIRE(answer.size() == size);
        CHECK(matches(answer, seed + 3));
        seed += 4;
    }
    // Both large at once, several in flight, with small ones between.
    std::atomic<int> right{0};
    sync_wait([](rpc::client* c, std::atomic<int>* right) -> task<void> {
        task_group g;
        for (std::uint64_t k = 0; k < 4; ++k) {
            g.spawn(shaped_call(c, 1000 + 2 * k, 3 << 20, 5 << 20, right));
            g.spawn(shaped_call(c, 2000 + 2 * k, 100, 200, right));
        }
        co_await g.join();
    }(&c, &right));
    CHECK(right == 8);
}

TEST_CASE("errors reach their call and the connection stays up", "[rpc]") {
    running_server s({.max_request = 1 << 20});
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address(), {.max_response = 2 << 20}));
    std::string message;

    CHECK(errc_of([&] { c.call_sync(77, payload(1, 10)); }, &message) == rpc::rpc_errc::unknown_method);
    CHECK(message.find("no method 77") != std::string::npos);
    CHECK(message.find("1 echo") != std::string::npos);

    CHECK(errc_of([&] { c.call_sync(4, payload(1, 10)); }, &message) == rpc::rpc_errc::handler_failed);
    CHECK(message.find("the disk is on fire") != std::string::npos);
    CHECK(message.find("fails") != std::string::npos);

    // Over the server's max_request: refused before anything is sent.
    CHECK(errc_of([&] { c.call_sync(1, payload(1, (1 << 20) + 1)); }, &message) == rpc::rpc_errc::too_large);
    CHECK(message.find("max_request") != std::string::npos);

    // Over the client's max_response: the server's answer is not read.
    CHECK(errc_of([&] { c.call_sync(2, shape_request(0, 1, (2 << 20) + 1, 2)); }, &message) ==
          rpc::rpc_errc::too_large);
    CHECK(message.find("max_response") != std::string::npos);

    // The request the handler finds wrong comes back as its what().
    auto bad = shape_request(100, 5, 10, 6);
    bad[50] ^= std::byte{1};
    CHECK(errc_of([&] { c.call_sync(2, bad); }, &message) == rpc::rpc_errc::handler_failed);
    CHECK(message.find("byte 50 is wrong") != std::string::npos);

    // An error compares with the generic condition.
    try {
        c.call_sync(77, {});
    } catch (const std::system_error& e) {
        CHECK(e.code() == rpc::rpc_errc::unknown_method);
    }
    // And the connection is still good.
    CHECK(matches(c.call_sync(1, payload(3, 5000)), 3));

    // The server counted each method's calls, answered and failed, exactly
    // (each counted before its answer left): the request over max_request
    // never reached it.
    rpc::server_metrics m = s.server.metrics();
    // A slow call of 50 ms, answered: its latency is at least that on
    // both sides.
    CHECK(c.call_sync(3, slow_request(50)).size() == 4);
    m = s.server.metrics();
    CHECK(m.unknown_method == 2);
    auto method = [&](std::uint32_t n) {
        for (const rpc::method_metrics& x : m.methods)
            if (x.method == n && !x.any_method)
                return x;
        FAIL("no method " << n << " in server::metrics()");
        return rpc::method_metrics{};
    };
    rpc::method_metrics echo = method(1), shaped = method(2), fails = method(4), slow = method(3);
    CHECK(echo.name == "echo");
    CHECK(echo.calls == 1);
    CHECK(echo.answered == 1);
    CHECK(echo.failed == 0);
    CHECK(shaped.calls == 2);  // over the client's max_response, then the wrong byte
    CHECK(shaped.failed == 2);
    CHECK(shaped.errors[static_cast<int>(rpc::rpc_errc::too_large)] == 1);
    CHECK(shaped.errors[static_cast<int>(rpc::rpc_errc::handler_failed)] == 1);
    CHECK(fails.calls == 1);
    CHECK(fails.failed == 1);
    CHECK(fails.errors[static_cast<int>(rpc::rpc_errc::handler_failed)] == 1);
    CHECK(fails.in_flight() == 0);
    CHECK(echo.errors == std::array<std::uint64_t, 8>{});
    CHECK(slow.calls == 1);
    CHECK(slow.answered == 1);
    // Answered calls are timed, failed ones not.
    CHECK(echo.latency.count() == 1);
    CHECK(shaped.latency.count() == 0);
    CHECK(fails.latency.count() == 0);
    REQUIRE(slow.latency.count() == 1);
    CHECK(slow.latency.max_ns() >= 50e6);
    CHECK(slow.latency.max_ns() < 5e9);
    CHECK(echo.latency.max_ns() < slow.latency.max_ns());

    // The client counted the same calls from its side, the one refused
    // before sending (over max_request) included: 8 made, 2 answered, 2
    // unknown methods, 2 handler failures, 2 too large.
    rpc::client_metrics cm = c.metrics();
    CHECK(cm.calls == 8);
    CHECK(cm.answered == 2);
    REQUIRE(cm.latency.count() == 2);
    CHECK(cm.latency.max_ns() >= 50e6);  // the slow call, end to end
    CHECK(cm.latency.quantile_ns(0.5) < 50e6);  // the echo
    CHECK(cm.errors[static_cast<int>(rpc::rpc_errc::unknown_method)] == 2);
    CHECK(cm.errors[static_cast<int>(rpc::rpc_errc::handler_failed)] == 2);
    CHECK(cm.errors[static_cast<int>(rpc::rpc_errc::too_large)] == 2);
    CHECK(cm.failed() == 6);
    CHECK(cm.in_flight() == 0);
}

namespace {

/// rpc_wire's header, written here by hand: what a hostile client (not
/// cordma's) would send. A request or response (type 2, 4) has the 16-byte
/// header (its payload's size is the rest of the frame: `size` unused),
/// every other frame the 48-byte one.
std::vector<std::byte> frame(std::uint8_t type, std::uint64_t id, std::uint32_t code, std::uint64_t size,
                             std::uint64_t addr = 0, std::uint32_t rkey = 0, std::size_t payload = 0) {
    bool compact = type == 2 || type == 4;
    std::vector<std::byte> f((compact ? 16 : 48) + payload, std::byte{0x33});
    auto put = [&](std::size_t at, std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i)
            f[at + i] = static_cast<std::byte>(v >> (8 * i));
    };
    put(0, 0x5052, 2);
    put(2, 2, 1);
    put(3, type, 1);
    put(4, 0, 4);
    if (compact) {
        put(8, id, 4);
        put(12, code, 4);
        return f;
    }
    put(8, id, 8);
    put(16, code, 4);
    put(20, 0, 4);
    put(24, size, 8);
    put(32, addr, 8);
    put(40, rkey, 4);
    put(44, 0, 4);
    return f;
}

/// A plain connection to the server carrying a valid client hello (code:
/// the protocol version, 2): a client that is not cordma's. The server's
/// first frame, a credit frame, shows that it took the hello (a refused
/// one would make every frame after it look refused too).
connection raw_client(const std::string& address, builder& raw) {
    std::vector<std::byte> hello = frame(1, 0, 2, 4096, 1 << 20);
    raw.agent(false).private_data(std::span<const std::byte>(hello));
    connection conn = sync_wait(raw.connect(address));
    local_mr in = raw.pool()->allocate(256);
    test::deadline limit(10s);
    recv_result first = sync_wait(conn.recv(in.all(), limit.token()));
    REQUIRE(first.length == 48);
    REQUIRE(in.data()[3] == std::byte{7});  // credit
    return conn;
}

/// Sends each frame; true if the server then closes the connection (a
/// receive on it fails) within 10 s.
bool server_closes(connection conn, builder& raw, const std::vector<std::vector<std::byte>>& frames) {
    auto pool = raw.pool();
    std::vector<local_mr> out;
    for (const auto& f : frames) {
        out.push_back(pool->allocate(f.size()));
        std::memcpy(out.back().data(), f.data(), f.size());
        try {
            sync_wait(conn.send(out.back().all()));
        } catch (const std::system_error&) {
            return true;  // closed already
        }
    }
    local_mr in = pool->allocate(1 << 16);
    try {
        test::deadline limit(10s);
        for (;;)
            sync_wait(conn.recv(in.all(), limit.token()));  // answers to the frames that were fine, then the end
    } catch (const work_completion_error&) {
        return true;
    } catch (const disconnected_error&) {
        return true;
    } catch (const operation_cancelled&) {
        return false;
    }
}

}  // namespace

TEST_CASE("a hostile client's frames close only its own connection", "[rpc]") {
    running_server s({.credits = 4});
    builder cb = test_builder();
    rpc::client good = sync_wait(rpc::client::connect(cb, s.address()));
    std::vector<std::byte> garbage(100, std::byte{0x5a});
    std::vector<std::byte> truncated = frame(6, 1, 0, 0);
    truncated.resize(20);

    struct hostile {
        const char* what;
        std::vector<std::vector<std::byte>> frames;
    };
    std::vector<hostile> cases = {
        {"garbage", {garbage}},
        {"a truncated header", {truncated}},
        {"a payload after a header-only frame", {frame(6, 1, 0, 0, 0, 0, 10)}},
        {"a request_rts with a forged rkey", {frame(3, 1, 1, 1 << 20, 0x10000, 0xdeadbeef)}},
        {"a done for a call never answered", {frame(6, 42, 0, 0)}},
        {"a response, which only a server sends", {frame(4, 1, 0, 0)}},
        {"calls beyond its credits", {frame(2, 1, 3, 4, 0, 0, 4), frame(2, 2, 3, 4, 0, 0, 4), frame(2, 3, 3, 4, 0, 0, 4),
                                      frame(2, 4, 3, 4, 0, 0, 4), frame(2, 5, 3, 4, 0, 0, 4)}},
    };
    // (Method 3 sleeps for the milliseconds its 4 payload bytes say:
    // 0x33333333 ms, so those five calls are all in the server at once.)
    for (auto& c : cases) {
        INFO(c.what);
        builder raw = test_builder();
        connection conn = raw_client(s.address(), raw);
        CHECK(server_closes(conn, raw, c.frames));
        // The good client never noticed.
        CHECK(matches(good.call_sync(1, payload(4, 2000)), 4));
    }
    CHECK(matches(good.call_sync(2, shape_request(10, 1, 100000, 5)), 5));
    auto until = clock_type::now() + 10s;
    while (s.server.clients() > 1 && clock_type::now() < until)
        std::this_thread::sleep_for(10ms);  // polling a count, bounded; not ordering anything
    CHECK(s.server.clients() == 1);
}

TEST_CASE("a call's deadline and its stop token end it at once; the client goes on", "[rpc]") {
    running_server s;
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address(), {.deadline = 20s}));

    auto start = clock_type::now();
    std::string message;
    CHECK(errc_of([&] { c.call_sync(3, slow_request(3000), {.deadline = 300ms}); }, &message) ==
          rpc::rpc_errc::timed_out);
    auto took = clock_type::now() - start;
    CHECK(took >= 300ms);
    CHECK(took < 2s);
    CHECK(message.find("300 ms") != std::string::npos);

    std::stop_source stop;
    std::thread stopper([&] {
        std::this_thread::sleep_for(200ms);  // the call is waiting by then; when does not matter
        stop.request_stop();
    });
    start = clock_type::now();
    CHECK(errc_of([&] { c.call_sync(3, slow_request(3000), {.token = stop.get_token()}); }) ==
          rpc::rpc_errc::cancelled);
    stopper.join();
    CHECK(clock_type::now() - start < 2s);
    // The std::errc comparison holds too.
    try {
        c.call_sync(3, slow_request(2000), {.deadline = 100ms});
    } catch (const std::system_error& e) {
        CHECK(e.code() == std::errc::timed_out);
    }
    // Calls after them work; the late answers (3 s on) are dropped.
    CHECK(matches(c.call_sync(1, payload(8, 64)), 8));
    CHECK(c.call_sync(3, slow_request(10)).size() == 4);
}

TEST_CASE("an rpc call's allocations in steady state, both sides, counted", "[rpc][allocation]") {
    running_server s;
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    std::vector<std::byte> request = payload(7, 64);
    std::vector<std::byte> response;
    constexpr int calls = 1000;
    auto counted = sync_wait([&]() -> task<std::uint64_t> {
        for (int i = 0; i < 100; ++i)  // warm up: caches, spare nodes, frame buffers
            response = co_await c.call(1, request);
        testing::allocation_counter counter;
        for (int i = 0; i < calls; ++i)
            response = co_await c.call(1, request);
        co_return counter.all_threads().allocations;
    }());
    CHECK(response == request);
    // Two per call today, both the API's: the handler's response vector
    // and the one call() returns (issue 33 asks for 0: calls and handlers
    // that fill the caller's memory). The id's node in the client's table
    // is recycled (3 before). What is left over comes from the liveness
    // read, once a second, not per call.
    // Under the sanitizers frames are not cached (detail/frame_cache.hpp):
    // then the call's coroutines allocate theirs too (10 per call on
    // 2026-11-29, both sides).
    double per_call = double(counted) / calls;
    WARN("allocations per 64 B echo call, client and server: " << per_call);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    CHECK(per_call < 13);
#else
    CHECK(per_call < 2.5);
#endif
}

TEST_CASE("call_into and handle_into: responses in place, every size, and what does not fit", "[rpc]") {
    running_server s;
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    std::vector<std::byte> buffer(1 << 20);
    // handle_into's replies: small (inline at once), then up to the eager
    // size (the first goes by rendezvous while the client's receives grow).
    for (std::size_t size : {std::size_t(0), std::size_t(1), std::size_t(64), std::size_t(4096), std::size_t(100),
                             std::size_t(4096), std::size_t(3000)}) {
        std::vector<std::byte> request = payload(static_cast<std::uint8_t>(size), size);
        std::fill(buffer.begin(), buffer.end(), std::byte{0xee});
        std::size_t n = sync_wait(c.call_into(6, request, buffer));
        REQUIRE(n == size);
        CHECK(std::equal(request.begin(), request.end(), buffer.begin()));
        CHECK(buffer[size] == std::byte{0xee});  // nothing written past the response
    }
    // A vector handler's large response, by rendezvous, into the caller's memory.
    std::vector<std::byte> request = shape_request(100, 3, 1 << 20, 4);
    CHECK(sync_wait(c.call_into(2, request, buffer)) == buffer.size());
    CHECK(matches(buffer, 4));
    // A response larger than the caller's memory: too_large, both sizes named;
    // inline and by rendezvous; the client goes on.
    std::string message;
    std::vector<std::byte> small(16);
    CHECK(errc_of([&] { sync_wait(c.call_into(1, payload(5, 100), small)); }, &message) ==
          rpc::rpc_errc::too_large);
    CHECK_THAT(message, Catch::Contains("a response of 100 bytes") && Catch::Contains("buffer of 16 bytes"));
    CHECK(errc_of([&] { sync_wait(c.call_into(2, request, std::span(buffer).first(1000))); }, &message) ==
          rpc::rpc_errc::too_large);
    CHECK_THAT(message, Catch::Contains("a response of 1048576 bytes") && Catch::Contains("buffer of 1000 bytes"));
    // A handler that claims more than its reply holds, and one whose
    // request does not fit its reply: handler_failed, named.
    CHECK(errc_of([&] { sync_wait(c.call_into(7, payload(1, 8), buffer)); }, &message) ==
          rpc::rpc_errc::handler_failed);
    CHECK_THAT(message, Catch::Contains("overclaims") && Catch::Contains("for a reply of 4096"));
    CHECK(errc_of([&] { sync_wait(c.call_into(6, payload(1, 5000), buffer)); }, &message) ==
          rpc::rpc_errc::handler_failed);
    CHECK_THAT(message, Catch::Contains("5000 bytes, reply holds 4096"));
    // And plain calls to an in-place handler.
    CHECK(c.call_sync(6, payload(9, 200)) == payload(9, 200));
    CHECK(sync_wait(c.call_into(6, payload(8, 64), buffer)) == 64);
}

TEST_CASE("an rpc call through call_into and handle_into allocates nothing in steady state", "[rpc][allocation]") {
    running_server s;
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    std::vector<std::byte> request = payload(7, 64);
    std::vector<std::byte> response(4096);
    constexpr int calls = 1000;
    std::size_t last = 0;
    double seconds = 0;
    auto counted = sync_wait([&]() -> task<std::uint64_t> {
        for (int i = 0; i < 100; ++i)  // warm up: caches, spare nodes, frame buffers
            last = co_await c.call_into(6, request, response);
        testing::allocation_counter counter;
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i)
            last = co_await c.call_into(6, request, response);
        std::uint64_t made = counter.all_threads().allocations;
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        co_return made;
    }());
    REQUIRE(last == request.size());
    CHECK(std::equal(request.begin(), request.end(), response.begin()));
    // What is left over is driven by the clock (the client's liveness
    // read of the server, timers), whatever the calls: the allowance grows
    // with the time they took, where one per call would be 1000 in a
    // fraction of a second. Under the sanitizers frames are not cached:
    // the count is then the call's coroutine frames (7 on 2026-11-29).
    double per_call = double(counted) / calls;
    INFO(counted << " allocations in " << calls << " calls, " << seconds << " s");
    WARN("allocations per 64 B in-place echo call, client and server: " << per_call);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    CHECK(per_call < 10);
#else
    CHECK(double(counted) < 0.05 * calls + 20 * seconds);
#endif
}

TEST_CASE("credits bound a client's calls in flight; the rest wait in order", "[rpc]") {
    running_server s({.credits = 2});
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    CHECK(c.credits() == 2);
    // Six calls of 300 ms with two credits: three rounds.
    auto start = clock_type::now();
    std::atomic<int> ok{0}, gone{0};
    sync_wait(slow_calls(&c, 6, 300, &ok, &gone));
    auto took = clock_type::now() - start;
    CHECK(ok == 6);
    CHECK(took >= 900ms);
}

/// `calls` echo calls of 64 B, `depth` at a time, each within `deadline`.
task<void> echo_burst(rpc::client* c, int index, int calls, int depth, std::chrono::milliseconds deadline,
                      std::atomic<int>* answered, std::atomic<int>* failed) {
    auto lane = [](rpc::client* c, std::uint64_t seed, int n, std::chrono::milliseconds deadline,
                   std::atomic<int>* answered, std::atomic<int>* failed) -> task<void> {
        for (int k = 0; k < n; ++k) {
            std::vector<std::byte> request = payload(seed + k, 64);
            try {
                std::vector<std::byte> r = co_await c->call(1, request, {.deadline = deadline});
                if (r == request)
                    ++*answered;
            } catch (const rpc::rpc_error& e) {
                ++*failed;
                WARN("call failed: " << e.what());
            }
        }
    };
    task_group g;
    for (int l = 0; l < depth; ++l)
        g.spawn(lane(c, std::uint64_t(index) * 1'000'000 + std::uint64_t(l) * 10'000, calls / depth, deadline,
                     answered, failed));
    co_await g.join();
}

TEST_CASE("fair credits: an idle client's unused credits go to a newcomer; the SRQ never runs dry", "[rpc]") {
    // 8 receives and 8 credits: the first client holds the whole budget.
    // The second can only call once the server has asked the first for
    // its unused credits and the first has given them back.
    running_server s({.receives = 8, .credits = 8});
    builder cb = test_builder();
    cb.rnr_retry(0);  // a request finding no receive posted fails its call at once
    rpc::client idle = sync_wait(rpc::client::connect(cb, s.address()));
    {
        std::atomic<int> answered{0}, failed{0};
        sync_wait(echo_burst(&idle, 0, 16, 8, 10s, &answered, &failed));  // it has its credits, all 8 used
        REQUIRE(answered == 16);
    }
    rpc::client newcomer = sync_wait(rpc::client::connect(cb, s.address()));
    std::atomic<int> answered{0}, failed{0};
    sync_wait(echo_burst(&newcomer, 1, 64, 8, 10s, &answered, &failed));
    CHECK(failed == 0);
    CHECK(answered == 64);
    // Both at once, 8 calls of 200 ms each (their requests hold their
    // receives meanwhile) on 8 receives: each holds its share (4), the
    // rest wait in the client, and not one request finds the SRQ empty.
    std::atomic<int> ok{0}, gone{0};
    auto both = [&]() -> task<void> {
        task_group g;
        g.spawn(slow_calls(&idle, 8, 200, &ok, &gone));
        g.spawn(slow_calls(&newcomer, 8, 200, &ok, &gone));
        co_await g.join();
    };
    auto start = clock_type::now();
    sync_wait(both());
    CHECK(gone == 0);
    CHECK(ok == 16);
    CHECK(clock_type::now() - start >= 400ms);  // two rounds: 8 in flight at a time in all
}

TEST_CASE("elastic receives: an idle client pins a few KiB; they grow with 4 KiB responses and shrink when idle",
          "[rpc]") {
    running_server s;  // eager_size 4096, 16 credits: the client posts 34 receives
    builder cb = test_builder();
    auto pool = cb.pool();
    std::size_t before = pool->bytes_in_use();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    CHECK(matches(c.call_sync(2, shape_request(0, 1, 16, 2)), 2));
    // Measured once a call was made (its send buffer, kept for the next
    // calls, comes from the pool too).
    std::size_t small = pool->bytes_in_use() - before;
    INFO("the client's receives and a send buffer: " << small << " bytes");
    CHECK(small <= 16 * 1024);  // 34 x 256 B, the liveness word, a send buffer (141 KiB before)
    // An error message longer than the small receives arrives whole (lent,
    // as a large response is, and the server asks for room meanwhile).
    try {
        c.call_sync(5, {});
        FAIL("no rpc_error was thrown");
    } catch (const rpc::rpc_error& e) {
        CHECK(e.code() == rpc::rpc_errc::handler_failed);
        CHECK(std::string(e.what()).find(long_error()) != std::string::npos);
    }
    auto calls = [&](std::uint64_t first, int n) {
        for (int i = 0; i < n; ++i) {
            auto answer = c.call_sync(2, shape_request(0, first + i, 4096, first + i + 1000));
            REQUIRE(answer.size() == 4096);
            REQUIRE(matches(answer, first + i + 1000));
        }
    };
    // 4 KiB responses: the first go by rendezvous while the server asks
    // for room, the rest inline into grown receives.
    calls(0, 100);
    std::size_t grown = pool->bytes_in_use() - before;
    INFO("grown: " << grown << " bytes");
    CHECK(grown >= small + 34 * 4096);
    // Idle: within a few seconds the server shrinks them and its pads cycle
    // the big ones out, which go back to the pool.
    // (The done frames' send buffer stays: up to 1 KiB more.)
    auto until = clock_type::now() + 10s;
    while (pool->bytes_in_use() - before > small + 1024 && clock_type::now() < until)
        std::this_thread::sleep_for(50ms);  // polling the pool's count
    CHECK(pool->bytes_in_use() - before <= small + 1024);
    // And again: they grow back, every byte right.
    calls(10'000, 50);
    CHECK(pool->bytes_in_use() - before >= small + 34 * 4096);
}

TEST_CASE("fair credits: more clients than receives, all calling at once, every call answered", "[rpc]") {
    // 4 receives for 10 clients with 4 calls each in flight: the credits
    // go round. At rnr_retry 0 a single request finding the SRQ empty
    // would fail its call (and its connection).
    running_server s({.receives = 4, .credits = 4});
    builder cb = test_builder();
    cb.rnr_retry(0);
    constexpr int clients = 10, calls = 24;
    std::vector<rpc::client> cs;
    for (int i = 0; i < clients; ++i)
        cs.push_back(sync_wait(rpc::client::connect(cb, s.address())));
    std::atomic<int> answered{0}, failed{0};
    auto all = [&]() -> task<void> {
        task_group g;
        for (int i = 0; i < clients; ++i)
            g.spawn(echo_burst(&cs[static_cast<std::size_t>(i)], i, calls, 4, 30s, &answered, &failed));
        co_await g.join();
    };
    sync_wait(all());
    CHECK(failed == 0);
    CHECK(answered == clients * calls);
}

TEST_CASE("a client process killed mid-call: the server serves the others", "[rpc]") {
    running_server s;
    builder cb = test_builder();
    rpc::client good = sync_wait(rpc::client::connect(cb, s.address()));
    test::peer_process victim({"rpc-client", s.address()});
    auto until = clock_type::now() + 20s;
    while (s.server.clients() < 2 && clock_type::now() < until)
        std::this_thread::sleep_for(10ms);  // polling a count, bounded; not ordering anything
    REQUIRE(s.server.clients() == 2);
    victim.kill_now();  // 8 slow calls in the server at that moment
    for (int i = 0; i < 50; ++i)
        CHECK(matches(good.call_sync(1, payload(i, 300)), i));
    until = clock_type::now() + 10s;
    while (s.server.clients() > 1 && clock_type::now() < until)
        std::this_thread::sleep_for(10ms);
    CHECK(s.server.clients() == 1);
    CHECK(matches(good.call_sync(2, shape_request(5000, 3, 5000, 4)), 4));
}

TEST_CASE("a server process that dies fails every pending call within 5 s", "[rpc]") {
    std::string address = test::test_address() + ":" + std::to_string(20000 + getpid() % 20000);
    test::peer_process server({"rpc-server", address});
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, address));  // retries until it listens
    CHECK(matches(c.call_sync(1, payload(1, 100)), 1));
    std::atomic<int> ok{0}, gone{0};
    clock_type::time_point killed;
    std::thread killer([&] {
        std::this_thread::sleep_for(300ms);  // the calls are in the server by then; when does not matter
        killed = clock_type::now();
        server.kill_now();
    });
    sync_wait(slow_calls(&c, 8, 60000, &ok, &gone));
    killer.join();
    auto took = clock_type::now() - killed;
    CHECK(gone == 8);
    CHECK(took < 5s);
    WARN("pending calls failed " << std::chrono::duration<double>(took).count() << " s after the kill");
}

TEST_CASE("a server that stops answering (its QP silenced) fails pending calls within 5 s", "[rpc]") {
    running_server s;
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    CHECK(matches(c.call_sync(1, payload(1, 100)), 1));
    auto conns = s.server.connections();
    REQUIRE(conns.size() == 1);
    std::atomic<int> ok{0}, gone{0};
    clock_type::time_point silenced;
    std::thread silencer([&] {
        std::this_thread::sleep_for(300ms);  // the calls are in the server by then; when does not matter
        silenced = clock_type::now();
        // The server's QP goes to ERROR without telling the client: from
        // the client's side, a host that stopped answering.
        conns[0].shut_down();
    });
    sync_wait(slow_calls(&c, 4, 6000, &ok, &gone));  // the handlers end 6 s on; the calls must fail first
    silencer.join();
    auto took = clock_type::now() - silenced;
    CHECK(gone == 4);
    CHECK(took < 5s);
    WARN("pending calls failed " << std::chrono::duration<double>(took).count() << " s after the server went silent");
}

TEST_CASE("handlers on an executor: a blocking handler does not stall the others", "[rpc]") {
    asio::thread_pool pool(2);
    std::atomic<int> off_listener{0};
    builder b = test_builder();
    rpc::server server(b, {.executor = [&pool](std::function<void()> f) { asio::post(pool, std::move(f)); }});
    auto listener_thread = b.event_listener();
    // Method 1 answers at once, method 3 blocks its thread for 1.5 s.
    auto blocking = [&](rpc::request r) -> task<std::vector<std::byte>> {
        if (!listener_thread->running_in_this_thread())
            ++off_listener;
        std::this_thread::sleep_for(std::chrono::milliseconds(r.method() == 3 ? 1500 : 0));
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    };
    server.handle(1, "quick", blocking);
    server.handle(3, "blocking", blocking);
    listener l = b.listen(any_port());
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(l, stop.get_token())); });

    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, l.address()));
    clock_type::duration fast_took{};
    std::atomic<int> right{0};
    sync_wait(blocking_and_fast(&c, &right, &fast_took));
    CHECK(right == 21);
    CHECK(off_listener == 21);
    CHECK(fast_took < 1500ms);  // they ran while the blocking handler slept
    stop.request_stop();
    serving.join();
}

TEST_CASE("without an SRQ (a receive queue per client), over the TCP exchange", "[rpc]") {
    running_server s({.credits = 4, .shared_receives = false}, endpoint_exchange::tcp);
    CHECK(s.server.shared_receive_queue() == nullptr);
    builder cb = test_builder();
    cb.exchange(endpoint_exchange::tcp);
    std::atomic<int> wrong{0}, answered{0};
    sync_wait(many_clients(cb, s.address(), 8, 100, 4, &wrong, &answered));
    CHECK(wrong == 0);
    CHECK(answered == 800);
    rpc::client c = sync_wait(rpc::client::connect(cb, s.address()));
    auto big = c.call_sync(2, shape_request(2 << 20, 1, 3 << 20, 2));
    CHECK(big.size() == (3u << 20));
    CHECK(matches(big, 2));
    for (auto& conn : s.server.connections()) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        REQUIRE(ibv_query_qp(conn.qp()->native_handle(), &attr, IBV_QP_STATE, &init) == 0);
        CHECK(init.srq == nullptr);
    }
}

TEST_CASE("typed calls, and options out of range refused by name", "[rpc]") {
    struct point {
        double x, y;
    };
    builder b = test_builder();
    rpc::server server(b);
    server.handle_as<point, double>(5, "norm", [](point p) -> task<double> { co_return p.x * p.x + p.y * p.y; });
    CHECK_THROWS_WITH(server.handle(5, "again", [](rpc::request) -> task<std::vector<std::byte>> { co_return {}; }),
                      Catch::Contains("registered already") && Catch::Contains("norm"));
    listener l = b.listen(any_port());
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(l, stop.get_token())); });
    builder cb = test_builder();
    rpc::client c = sync_wait(rpc::client::connect(cb, l.address()));
    CHECK(sync_wait(c.call_as<double>(5, point{3, 4})) == 25.0);
    // A request of the wrong size fails in the handler, by name.
    CHECK(errc_of([&] { c.call_sync(5, payload(1, 3)); }) == rpc::rpc_errc::handler_failed);
    stop.request_stop();
    serving.join();

    builder other = test_builder();
    CHECK_THROWS_WITH(rpc::server(other, {.eager_size = 10}), Catch::Contains("eager_size"));
    CHECK_THROWS_WITH(rpc::server(other, {.receives = 4, .credits = 8}), Catch::Contains("receives"));
    CHECK_THROWS_WITH(sync_wait(rpc::client::connect(other, "127.0.0.1:1", {.deadline = 0ms})),
                      Catch::Contains("deadline"));
    // A client reaching a listener that is not an rpc server.
    builder plain = test_builder();
    plain.agent(false);
    listener pl = plain.listen(any_port());
    // The client reads the accept's private data before it says it is
    // connected, and refuses (rdma_reject) instead: the listener's accept
    // then has nothing to return, and is stopped once the client is done.
    std::stop_source no_more;
    std::thread acceptor([&] {
        try {
            connection conn = sync_wait(pl.accept(no_more.get_token()));
            (void)conn;
        } catch (...) {
        }
    });
    std::string message;
    CHECK(errc_of([&] { sync_wait(rpc::client::connect(cb, pl.address())); }, &message) == rpc::rpc_errc::protocol);
    CHECK(message.find("not a cordma rpc server") != std::string::npos);
    no_more.request_stop();
    acceptor.join();
}
