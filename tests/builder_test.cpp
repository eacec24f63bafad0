// Connections made by the builder: rdma_cm connect/accept in one process and
// across processes, many clients, a peer killed mid-flight, and the errors
// users get for bad input.

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/pending.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/deadline.hpp"
#include "support/peer_process.hpp"
#include "support/rxe_device.hpp"


using namespace cordma;
using test::any_port;
using namespace std::chrono_literals;

namespace {

using test::peer_process;

task<std::string> echo_once(connection conn, std::shared_ptr<memory_pool> pool, std::string text) {
    local_mr out = pool->allocate(256);
    local_mr in = pool->allocate(256);
    std::memcpy(out.data(), text.data(), text.size());
    auto [got, sent] = co_await when_all(conn.recv(in.all()), conn.send(out.slice(0, text.size())));
    (void)sent;
    co_return std::string(reinterpret_cast<char*>(in.data()), got.length);
}

/// The client's half of burst_then_slow_accept: waits for the server's
/// greeting and answers it with "c" in front.
task<std::string> answer_greeting(connection conn, std::shared_ptr<memory_pool> pool) {
    co_await conn.event_listener()->schedule();
    local_mr in = pool->allocate(256);
    local_mr out = pool->allocate(256);
    auto got = co_await conn.recv(in.all());
    std::string text = "c" + std::string(reinterpret_cast<char*>(in.data()), got.length);
    std::memcpy(out.data(), text.data(), text.size());
    co_await conn.send(out.slice(0, text.size()));
    co_return text;
}

/// 64 clients connect at once, and every one is connected before the
/// server calls accept() at all (the listener answers each as it
/// arrives); then accept() takes them one at a time, slowly, and the
/// server greets each, which answers.
void burst_then_slow_accept(builder b) {
    // 128 handshakes at once in one process (under ASan, in an emulated VM,
    // beside whatever else keeps the cores busy) can take far longer than
    // the default 10 s; what this test checks is that each one completes.
    b.connect_timeout(90s);
    test::deadline limit(150s);
    listener l = b.listen(any_port());
    constexpr int clients = 64;
    std::vector<task<connection>> connects;
    for (int i = 0; i < clients; ++i)
        connects.push_back(b.connect(l.address()));
    std::vector<connection> connected = sync_wait(when_all(std::move(connects)));
    REQUIRE(connected.size() == clients);
    auto pool = b.pool();
    std::vector<pending<std::string>> answers;
    for (auto& c : connected)
        answers.push_back(start(answer_greeting(c, pool)));
    // Each answer_greeting hopped to the event listener thread; once this
    // hop runs after them, every client's receive is posted.
    sync_wait([](std::shared_ptr<event_listener> el) -> task<void> { co_await el->schedule(); }(b.event_listener()));
    int answered = 0;
    for (int i = 0; i < clients; ++i) {
        std::this_thread::sleep_for(10ms);  // a slow accept(): its clients are long connected
        connection server = sync_wait(l.accept(limit.token()));
        std::string greeting = "s" + std::to_string(i);
        std::string answer = sync_wait(echo_once(server, pool, greeting));
        answered += answer == "c" + greeting;
    }
    CHECK(answered == clients);
    for (auto& a : answers)
        CHECK(sync_wait(a.wait()).size() >= 2);
}

/// A listener with a backlog of 4 and no accept(): 6 clients connect at
/// once; 4 are held (connected), the other 2 are refused until their
/// connect_timeout (with `refusal` in the message, if given). accept()
/// then takes the 4.
void backlog_refusal(builder b, const std::string& refusal) {
    b.connect_timeout(60s);
    b.backlog(4);
    test::deadline limit(120s);
    listener l = b.listen(any_port());
    builder client_side = b;
    client_side.connect_timeout(4s);  // this copy only: how long the refused retry
    std::vector<task<std::string>> attempts;
    std::vector<connection> held(6);
    for (int i = 0; i < 6; ++i)
        attempts.push_back([](builder bb, std::string address, connection* out) -> task<std::string> {
            try {
                *out = co_await bb.connect(address);
                co_return std::string();
            } catch (const std::system_error& e) {
                co_return std::string(e.what());
            }
        }(client_side, l.address(), &held[static_cast<std::size_t>(i)]));
    std::vector<std::string> errors = sync_wait(when_all(std::move(attempts)));
    int connected = 0, refused = 0;
    for (const auto& e : errors) {
        if (e.empty()) {
            ++connected;
            continue;
        }
        INFO(e);
        ++refused;
        if (!refusal.empty())
            CHECK_THAT(e, Catch::Contains(refusal) && Catch::Contains("builder::backlog"));
    }
    CHECK(connected == 4);
    CHECK(refused == 2);
    for (int i = 0; i < connected; ++i)
        CHECK_FALSE(sync_wait(l.accept(limit.token())).is_broken());
}

}  // namespace

TEST_CASE("connect and accept in one process carry data both ways", "[builder]") {
    builder b;
    listener l = b.listen(any_port());
    INFO("listening on " << l.address());
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto pool = b.pool();
    auto [a, c] = sync_wait(when_all(echo_once(server, pool, "from the server"), echo_once(client, pool, "from the client")));
    CHECK(a == "from the client");
    CHECK(c == "from the server");
    CHECK_THAT(client.peer(), Catch::StartsWith(test::test_address()));
    sync_wait(client.close());
    CHECK(client.is_broken());
}

TEST_CASE("64 clients connect at once before any accept(), and a slow accept() then takes every one", "[builder]") {
    burst_then_slow_accept(test::test_builder());
}

TEST_CASE("past the listener's backlog a client is refused, saying so, and the others are held", "[builder]") {
    backlog_refusal(test::test_builder(), "the server's backlog of 4 is full");
}

TEST_CASE("bad input gets a clear error before anything hangs", "[builder]") {
    builder b;
    CHECK_THROWS_WITH(b.connect("10.0.0.1"), Catch::Contains("'10.0.0.1'") && Catch::Contains("no port"));
    CHECK_THROWS_WITH(b.connect("10.0.0.1:99999"), Catch::Contains("not a number in 1..65535"));
    CHECK_THROWS_WITH(b.connect("fe80::1:80"), Catch::Contains("brackets"));
    CHECK_THROWS_WITH(b.connect("no-such-host.invalid:7471"), Catch::Contains("cannot resolve host 'no-such-host.invalid'"));
    CHECK_THROWS_WITH(builder().device("mlx9_9").connect(test::test_address() + ":7471"),
                      Catch::Contains("mlx9_9") && Catch::Contains("devices here: rxe0"));
    CHECK_THROWS_WITH(b.rnr_retry(8), Catch::Contains("7 = forever"));
}

TEST_CASE("a peer that never answers times out after the builder's connect timeout", "[builder]") {
    // 10.77.0.9 is on rxe0's subnet but nobody has it: address resolution
    // (ARP) never completes.
    builder b;
    b.connect_timeout(1500ms);
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(sync_wait(b.connect("10.77.0.9:7471")), std::system_error,
                         Catch::Predicate<std::system_error>([](const std::system_error& e) {
                             INFO(e.what());
                             return e.code() == std::errc::timed_out || e.code() == std::errc::host_unreachable;
                         }));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 1000ms);
    CHECK(took < 10s);
}

TEST_CASE("connect and accept across two processes", "[builder][process]") {
    builder b;
    listener l = b.listen(any_port());
    peer_process peer({"echo", l.address()});
    connection conn = sync_wait(l.accept());
    auto pool = b.pool();
    // The peer echoes one message back.
    CHECK(sync_wait(echo_once(conn, pool, "hello, other process")) == "hello, other process");
    CHECK(peer.wait() == 0);
}

TEST_CASE("a peer killed with 100 operations in flight fails them all promptly", "[builder][process]") {
    builder b;
    listener l = b.listen(any_port());
    peer_process peer({"sleep", l.address()});
    connection conn = sync_wait(l.accept());
    auto pool = b.pool();
    std::vector<task<bool>> pending;
    for (int i = 0; i < 100; ++i)
        pending.push_back([](connection c, local_mr buffer) -> task<bool> {
            try {
                co_await c.recv(buffer.all());
                co_return false;
            } catch (const std::system_error&) {
                co_return true;
            }
        }(conn, pool->allocate(64)));
    auto failures = [&]() -> task<std::vector<bool>> { co_return co_await when_all(std::move(pending)); };
    std::vector<bool> failed;
    auto start = std::chrono::steady_clock::now();
    std::thread killer([&] {
        std::this_thread::sleep_for(300ms);
        start = std::chrono::steady_clock::now();
        kill(peer.pid, SIGKILL);
    });
    failed = sync_wait(failures());
    auto took = std::chrono::steady_clock::now() - start;
    killer.join();
    CHECK(std::count(failed.begin(), failed.end(), true) == 100);
    CHECK(took < 5s);
    CHECK_THROWS_AS(sync_wait(conn.send(pool->allocate(8).all())), disconnected_error);
    // The survivor accepts a new client.
    peer_process next({"echo", l.address()});
    connection again = sync_wait(l.accept());
    CHECK(sync_wait(echo_once(again, pool, "still here")) == "still here");
}

// ---------------------------------------------------------------------------
// The TCP endpoint exchange (endpoint_exchange::tcp): the same traffic as
// above, with the QP endpoints carried over a TCP socket that then stays open
// to tell each side when the other goes; plus its own errors.

#include <array>
#include <cstdint>
#include <stop_token>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "connect/connect_backoff.hpp"
#include "connect/tcp/endpoint_message.hpp"

namespace {

builder tcp_builder() {
    builder b;
    b.exchange(endpoint_exchange::tcp);
    return b;
}

task<void> recv_once(connection conn, local_mr buffer) { co_await conn.recv(buffer.all()); }

}  // namespace

TEST_CASE("over the TCP endpoint exchange, connect and accept in one process carry data both ways", "[builder][tcp]") {
    builder b = tcp_builder();
    listener l = b.listen(any_port());
    INFO("listening on " << l.address());
    CHECK_THAT(l.address(), !Catch::EndsWith(":0"));  // the port really bound
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto pool = b.pool();
    auto [a, c] = sync_wait(when_all(echo_once(server, pool, "from the server"), echo_once(client, pool, "from the client")));
    CHECK(a == "from the client");
    CHECK(c == "from the server");
    CHECK_THAT(client.peer(), Catch::StartsWith(test::test_address()));
    CHECK_THAT(server.peer(), Catch::StartsWith(test::test_address()));

    SECTION("closing one side fails the other's operations, through the socket") {
        sync_wait(client.close());
        CHECK(client.is_broken());
        CHECK_THROWS_AS(sync_wait(recv_once(server, pool->allocate(64))), std::system_error);
        CHECK_THROWS_WITH(sync_wait(server.send(pool->allocate(8).all())),
                          Catch::Contains("disconnected (TCP exchange socket closed)"));
    }
    SECTION("the connecting side opens another queue pair to the same listener") {
        auto [server2, client2] = sync_wait(when_all(l.accept(), client.new_connection()));
        auto [a2, c2] = sync_wait(when_all(echo_once(server2, pool, "s2"), echo_once(client2, pool, "c2")));
        CHECK(a2 == "c2");
        CHECK(c2 == "s2");
        CHECK(client2.qp()->qp_num() != client.qp()->qp_num());
    }
}

TEST_CASE("over the TCP endpoint exchange, 64 clients connect at once before any accept(), and a slow accept() "
          "then takes every one",
          "[builder][tcp]") {
    burst_then_slow_accept(tcp_builder());
}

TEST_CASE("over the TCP endpoint exchange, past the listener's backlog a client is refused, saying so, and the "
          "others are held",
          "[builder][tcp]") {
    backlog_refusal(tcp_builder(), "the server's backlog of 4 is full");
}

TEST_CASE("a refused client's waits are jittered and double from 10 ms up to 200 ms", "[builder]") {
    detail::connect_backoff backoff;
    std::vector<long> steps;
    for (int i = 0; i < 8; ++i) {
        long step = static_cast<long>(backoff.step().count());
        long wait = static_cast<long>(backoff.next().count());
        INFO("attempt " << i << ": step " << step << " ms, wait " << wait << " ms");
        CHECK(wait >= step / 2);
        CHECK(wait <= step);
        steps.push_back(step);
    }
    CHECK(steps == std::vector<long>{10, 20, 40, 80, 160, 200, 200, 200});
    // Jittered: 32 clients refused together do not all come back at once.
    std::vector<long> first;
    for (int i = 0; i < 32; ++i) {
        detail::connect_backoff b;
        b.next();
        b.next();
        first.push_back(static_cast<long>(b.next().count()));  // in 20..40 ms
    }
    std::sort(first.begin(), first.end());
    CHECK(std::unique(first.begin(), first.end()) - first.begin() > 4);
}

TEST_CASE("over the TCP endpoint exchange, a peer that never answers times out after the connect timeout",
          "[builder][tcp]") {
    // 10.77.0.9 is on rxe0's subnet but nobody has it: the SYN goes nowhere.
    builder b = tcp_builder();
    b.connect_timeout(1500ms);
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(sync_wait(b.connect("10.77.0.9:7471")), std::system_error,
                         Catch::Predicate<std::system_error>([](const std::system_error& e) {
                             INFO(e.what());
                             return e.code() == std::errc::timed_out &&
                                    std::string(e.what()).find("timed out after 1.5 s") != std::string::npos;
                         }));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 1400ms);
    CHECK(took < 5s);
}

TEST_CASE("over the TCP endpoint exchange, a malformed endpoint message gets an error naming the field",
          "[builder][tcp]") {
    // A TCP server that answers with whatever the section says.
    asio::io_context context;
    asio::ip::tcp::acceptor raw(context, asio::ip::tcp::endpoint(asio::ip::make_address(test::test_address()), 0));
    std::string where = test::test_address() + ":" + std::to_string(raw.local_endpoint().port());
    using message = std::array<std::uint8_t, detail::endpoint_message_size>;
    auto serve = [&raw](message reply) {
        return std::thread([&raw, reply] {
            asio::ip::tcp::socket s = raw.accept();
            asio::write(s, asio::buffer(reply));
            message in{};
            asio::error_code ec;
            asio::read(s, asio::buffer(in), ec);  // the client's endpoint
            asio::read(s, asio::buffer(in), ec);  // then EOF: it gave up
        });
    };
    auto fails_naming = [](const std::string& field) {
        return Catch::Predicate<std::system_error>([field](const std::system_error& e) {
            INFO(e.what());
            return e.code() == std::errc::protocol_error &&
                   std::string(e.what()).find("malformed endpoint message") != std::string::npos &&
                   std::string(e.what()).find("field '" + field + "'") != std::string::npos;
        });
    };
    builder b = tcp_builder();
    ibv_gid gid{};
    gid.raw[10] = gid.raw[11] = 0xff;
    gid.raw[12] = 10;
    detail::endpoint_message good{{.qpn = 17, .psn = 1, .gid = gid, .lid = 0}, IBV_MTU_1024};

    SECTION("not cordma at all: the magic") {
        message http{};
        std::memcpy(http.data(), "HTTP/1.1 400 Bad Request\r\n\r\n", 28);
        std::thread server = serve(http);
        CHECK_THROWS_MATCHES(sync_wait(b.connect(where)), std::system_error, fails_naming("magic"));
        server.join();
    }
    SECTION("a version this side does not speak") {
        message m = detail::encode_endpoint_message(good);
        m[5] = 9;
        std::thread server = serve(m);
        CHECK_THROWS_MATCHES(sync_wait(b.connect(where)), std::system_error, fails_naming("version"));
        server.join();
    }
    SECTION("a QP number wider than 24 bits") {
        detail::endpoint_message wide = good;
        wide.endpoint.qpn = 1u << 24;
        std::thread server = serve(detail::encode_endpoint_message(wide));
        CHECK_THROWS_MATCHES(sync_wait(b.connect(where)), std::system_error, fails_naming("qpn"));
        server.join();
    }
    SECTION("an MTU code out of range") {
        message m = detail::encode_endpoint_message(good);
        m[32] = 7;
        std::thread server = serve(m);
        CHECK_THROWS_MATCHES(sync_wait(b.connect(where)), std::system_error, fails_naming("mtu"));
        server.join();
    }
}

TEST_CASE("a TCP exchange listener's waiting accept can be cancelled, and closing it fails the rest",
          "[builder][tcp]") {
    builder b = tcp_builder();
    listener l = b.listen(any_port());
    std::stop_source stop;
    std::thread canceller([&] {
        std::this_thread::sleep_for(100ms);
        stop.request_stop();
    });
    CHECK_THROWS_AS(sync_wait(l.accept(stop.get_token())), operation_cancelled);
    canceller.join();
    std::thread closer([&] {
        std::this_thread::sleep_for(100ms);
        l.close();
    });
    CHECK_THROWS_AS(sync_wait(l.accept()), disconnected_error);
    closer.join();
    // A client arriving now is refused (until its deadline) or sees the
    // socket close.
    b.connect_timeout(500ms);
    CHECK_THROWS_AS(sync_wait(b.connect(l.address())), std::system_error);
}

TEST_CASE("a TCP exchange listener drops clients that say nothing or send junk, and accepts the next",
          "[builder][tcp]") {
    builder b = tcp_builder();
    b.connect_timeout(2s);
    listener l = b.listen(any_port());
    auto port = static_cast<std::uint16_t>(std::stoi(l.address().substr(l.address().rfind(':') + 1)));
    asio::io_context context;
    asio::ip::tcp::endpoint endpoint(asio::ip::make_address(test::test_address()), port);
    asio::ip::tcp::socket silent(context);
    silent.connect(endpoint);
    asio::ip::tcp::socket noisy(context);
    noisy.connect(endpoint);
    std::array<std::uint8_t, detail::endpoint_message_size> junk;
    junk.fill('x');
    asio::write(noisy, asio::buffer(junk));
    // A real client, behind both: it is served at once, without waiting
    // out the silent one's connect_timeout (each handshake runs on its own;
    // a listener that took them in turn held up every client behind a
    // silent one).
    builder other = tcp_builder();
    auto start = std::chrono::steady_clock::now();
    auto [server, client] = sync_wait(when_all(l.accept(), other.connect(l.address())));
    CHECK(std::chrono::steady_clock::now() - start < 1500ms);
    auto [a, c] = sync_wait(when_all(echo_once(server, b.pool(), "to the client"),
                                     echo_once(client, other.pool(), "to the server")));
    CHECK(a == "to the server");
    CHECK(c == "to the client");
    // Both are dropped: the noisy one at once, the silent one at its
    // connect_timeout. Each reads the listener's endpoint message, then
    // the end of the connection (within 10 s: never a hang).
    auto dropped_after = [&](asio::ip::tcp::socket& s) {
        timeval limit{10, 0};
        setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        std::array<std::uint8_t, 64> sink;
        asio::error_code ec;
        while (!ec)
            s.read_some(asio::buffer(sink), ec);
        CHECK((ec == asio::error::eof || ec == asio::error::connection_reset));
        return std::chrono::steady_clock::now() - start;
    };
    CHECK(dropped_after(noisy) < 1500ms);
    CHECK(dropped_after(silent) >= 1900ms);
}

TEST_CASE("over the TCP endpoint exchange, connect and accept across two processes", "[builder][process][tcp]") {
    builder b = tcp_builder();
    listener l = b.listen(any_port());
    peer_process peer({"echo", l.address(), "tcp"});
    connection conn = sync_wait(l.accept());
    auto pool = b.pool();
    CHECK(sync_wait(echo_once(conn, pool, "hello, other process")) == "hello, other process");
    CHECK(peer.wait() == 0);
}

TEST_CASE("over the TCP endpoint exchange, a peer killed with 100 operations in flight fails them all promptly",
          "[builder][process][tcp]") {
    builder b = tcp_builder();
    listener l = b.listen(any_port());
    peer_process peer({"sleep", l.address(), "tcp"});
    connection conn = sync_wait(l.accept());
    auto pool = b.pool();
    std::vector<task<bool>> pending;
    for (int i = 0; i < 100; ++i)
        pending.push_back([](connection c, local_mr buffer) -> task<bool> {
            try {
                co_await c.recv(buffer.all());
                co_return false;
            } catch (const std::system_error&) {
                co_return true;
            }
        }(conn, pool->allocate(64)));
    auto failures = [&]() -> task<std::vector<bool>> { co_return co_await when_all(std::move(pending)); };
    std::vector<bool> failed;
    auto start = std::chrono::steady_clock::now();
    std::thread killer([&] {
        std::this_thread::sleep_for(300ms);
        start = std::chrono::steady_clock::now();
        kill(peer.pid, SIGKILL);
    });
    failed = sync_wait(failures());
    auto took = std::chrono::steady_clock::now() - start;
    killer.join();
    CHECK(std::count(failed.begin(), failed.end(), true) == 100);
    CHECK(took < 5s);
    CHECK_THROWS_WITH(sync_wait(conn.send(pool->allocate(8).all())),
                      Catch::Contains("disconnected (TCP exchange socket closed)"));
    // The survivor accepts a new client.
    peer_process next({"echo", l.address(), "tcp"});
    connection again = sync_wait(l.accept());
    CHECK(sync_wait(echo_once(again, pool, "still here")) == "still here");
}
