// Connections made by the builder: rdma_cm connect/accept in one process and
// across processes, many clients, a peer killed mid-flight, and the errors
// users get for bad input.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

extern char** environ;

using namespace cordma;
using namespace std::chrono_literals;

namespace {

std::string any_port() { return test::test_address() + ":0"; }

// The peer program (tests/support/peer.cpp), started as a separate process.
struct peer_process {
    pid_t pid = -1;
    explicit peer_process(std::vector<std::string> args) {
        const char* path = std::getenv("CORDMA_TEST_PEER");
        REQUIRE(path != nullptr);
        args.insert(args.begin(), path);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        REQUIRE(posix_spawn(&pid, path, nullptr, nullptr, argv.data(), environ) == 0);
    }
    int wait() {
        int status = 0;
        waitpid(pid, &status, 0);
        pid = -1;
        return status;
    }
    ~peer_process() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }
};

task<std::string> echo_once(connection conn, std::shared_ptr<memory_pool> pool, std::string text) {
    local_mr out = pool->allocate(256);
    local_mr in = pool->allocate(256);
    std::memcpy(out.data(), text.data(), text.size());
    auto [got, sent] = co_await when_all(conn.recv(in.all()), conn.send(out.slice(0, text.size())));
    (void)sent;
    co_return std::string(reinterpret_cast<char*>(in.data()), got.length);
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

TEST_CASE("64 clients connect to one listener at once and each exchanges data", "[builder]") {
    builder b;
    listener l = b.listen(any_port());
    constexpr int clients = 64;
    std::vector<task<std::string>> work;
    auto pool = b.pool();
    for (int i = 0; i < clients; ++i) {
        work.push_back([](builder bb, listener ll, std::shared_ptr<memory_pool> p, int n) -> task<std::string> {
            auto [s, c] = co_await when_all(ll.accept(), bb.connect(ll.address()));
            auto [from_client, from_server] =
                co_await when_all(echo_once(s, p, "s" + std::to_string(n)), echo_once(c, p, "c" + std::to_string(n)));
            co_return from_client + "/" + from_server;
        }(b, l, pool, i));
    }
    auto results = sync_wait(when_all(std::move(work)));
    int matched = 0;
    for (const auto& r : results)
        matched += r.size() >= 4 && r[0] == 'c' && r.find("/s") != std::string::npos;
    CHECK(matched == clients);
}

TEST_CASE("connect to a port with nothing listening is refused in under a second", "[builder]") {
    builder b;
    (void)b.event_loop();
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(sync_wait(b.connect(test::test_address() + ":19999")), std::system_error,
                         Catch::Predicate<std::system_error>([](const std::system_error& e) {
                             INFO(e.what());
                             return e.code() == std::errc::connection_refused &&
                                    std::string(e.what()).find("connection refused") != std::string::npos;
                         }));
    CHECK(std::chrono::steady_clock::now() - start < 1s);
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
