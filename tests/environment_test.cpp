// What a new user's host gets wrong, tried on a real device: the pool's
// registration size (the setting a small locked-memory limit needs), an
// address no route or no host answers, a TCP exchange error compared with
// std::errc, and (run by tests/environment_memlock.sh without CAP_IPC_LOCK
// under a 4 MiB limit) the locked-memory error and the builder setting that
// gets past it.

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::test_builder;
using namespace std::chrono_literals;

namespace {

/// An address on the test device's own /24 that no host has (the VMs use
/// .1 to .4): ARP gets no answer, so the kernel reports it unreachable.
std::string silent_neighbour() {
    std::string a = test::test_address();
    return a.substr(0, a.rfind('.')) + ".213";
}

/// A server and a client of `b` in one process write 4 KiB to each other's
/// granted memory and read it back; returns what the client read.
task<std::string> round_trip(builder& b) {
    listener l = b.listen(any_port());
    auto [server, client] = co_await when_all(l.accept(), b.connect(l.address()));
    remote_mr theirs = co_await client.request_remote_mr(4096);
    local_mr mine = b.pool()->allocate(4096);
    std::string text = "bytes that crossed rxe under a small memlock limit";
    std::memcpy(mine.data(), text.data(), text.size());
    co_await client.write(mine.slice(0, text.size()), theirs.slice(0, text.size()));
    std::memset(mine.data(), 0, 4096);
    co_await client.read(mine.slice(0, text.size()), theirs.slice(0, text.size()));
    std::string got(reinterpret_cast<const char*>(mine.data()), text.size());
    co_await client.close();
    co_return got;
}

bool has_ipc_lock() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("CapEff:", 0) == 0)
            return (std::stoull(line.substr(7), nullptr, 16) >> 14) & 1;
    return false;
}

}  // namespace

TEST_CASE("the pool registers in chunks of builder::pool_chunk_size, and up front with pool_initial_size",
          "[environment]") {
    SECTION("small chunks") {
        builder b = test_builder();
        b.pool_chunk_size(64 << 10);
        auto pool = b.pool();
        CHECK(pool->chunk_size() == (64u << 10));
        CHECK(pool->bytes_registered() == 0);
        local_mr a = pool->allocate(1000);
        CHECK(pool->bytes_registered() == (64u << 10));
        local_mr big = pool->allocate(100 << 10);  // larger than a chunk: a chunk of its own
        CHECK(pool->chunk_count() == 2);
        CHECK(pool->bytes_registered() == (64u << 10) + (100u << 10));
    }
    SECTION("registered up front") {
        builder b = test_builder();
        b.pool_chunk_size(64 << 10).pool_initial_size(200 << 10);
        auto pool = b.pool();
        CHECK(pool->chunk_count() == 4);  // 200 KiB in 64 KiB chunks
        CHECK(pool->bytes_registered() == (256u << 10));
        local_mr a = pool->allocate(100 << 10);
        CHECK(pool->chunk_count() == 5);  // larger than a chunk
    }
    SECTION("a connection made with small chunks carries data") {
        builder b = test_builder();
        b.pool_chunk_size(16 << 10);
        CHECK(sync_wait(round_trip(b)) == "bytes that crossed rxe under a small memlock limit");
        CHECK(b.pool()->chunk_size() == (16u << 10));
    }
    SECTION("once the pool exists, a different size is refused, not ignored") {
        builder b = test_builder();
        b.pool();
        CHECK_THROWS_WITH(b.pool_chunk_size(1 << 20), Catch::Contains("builder::pool_chunk_size(1048576)") &&
                                                           Catch::Contains("already exists"));
        CHECK_THROWS_WITH(b.pool_initial_size(1 << 20), Catch::Contains("builder::pool_initial_size(1048576)"));
        CHECK_NOTHROW(b.pool_chunk_size(4 << 20));  // the size it has
    }
    SECTION("less than a page is refused") {
        builder b;
        CHECK_THROWS_AS(b.pool_chunk_size(4095), std::invalid_argument);
        connection_settings s;
        s.pool_chunk_size = 100;
        builder direct(s);
        direct.device(test::test_device_name());
        CHECK_THROWS_WITH(direct.pool(), Catch::Contains("pool_chunk_size=100"));
    }
}

TEST_CASE("an address no host answers is unreachable, and the error says through which netdev", "[environment]") {
    for (auto how : {endpoint_exchange::rdma_cm, endpoint_exchange::tcp}) {
        INFO((how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"));
        builder b = test_builder();
        b.exchange(how).connect_timeout(8s);
        std::string target = silent_neighbour() + ":7471";
        auto start = std::chrono::steady_clock::now();
        try {
            sync_wait(b.connect(target));
            FAIL("connect to " << target << " succeeded");
        } catch (const connect_error& e) {
            INFO(e.what());
            // Generic, whatever the transport: Asio's system-category codes
            // are given in the generic category, as cordma's own are.
            CHECK((e.code() == std::errc::host_unreachable || e.code() == std::errc::timed_out));
            CHECK(e.code().category() == std::generic_category());
            CHECK_THAT(e.what(), Catch::Contains(silent_neighbour()));
            if (how == endpoint_exchange::rdma_cm && e.code() == std::errc::host_unreachable) {
                // The route leaves through the test device's own netdev.
                CHECK_THAT(e.what(), Catch::Contains("leaves through") && Catch::Contains("no host answered"));
            }
        }
        CHECK(std::chrono::steady_clock::now() - start < 20s);
    }
}

TEST_CASE("an address with no route says so, naming the RDMA devices there are", "[environment]") {
    builder b = test_builder();
    b.connect_timeout(4s);
    // TEST-NET-2: routed nowhere inside the VM (no default route), or, on a
    // host with a default route, through a netdev the message names.
    try {
        sync_wait(b.connect("198.51.100.7:7471"));
        FAIL("connect to 198.51.100.7 succeeded");
    } catch (const connect_error& e) {
        INFO(e.what());
        CHECK(e.code() == std::errc::host_unreachable);
        CHECK_THAT(e.what(), (Catch::Contains("no route to 198.51.100.7") && Catch::Contains("RDMA devices here")) ||
                                 Catch::Contains("the route to 198.51.100.7 leaves through"));
    }
}

TEST_CASE("a refused TCP exchange compares equal to std::errc::connection_refused", "[environment]") {
    builder b = test_builder();
    b.exchange(endpoint_exchange::tcp).connect_timeout(1s);
    try {
        sync_wait(b.connect(test::test_address() + ":9"));  // discard: nothing listens
        FAIL("connect succeeded");
    } catch (const connect_error& e) {
        INFO(e.what());
        CHECK(e.code() == std::errc::connection_refused);
    }
}

// Run by tests/environment_memlock.sh: without CAP_IPC_LOCK, under a 4 MiB
// locked-memory limit (a container's default is 8 MiB; root never sees this).
TEST_CASE("under a 4 MiB memlock limit the default pool is refused with the limit and the fix, and small chunks connect",
          "[.memlock]") {
    rlimit limit{};
    REQUIRE(getrlimit(RLIMIT_MEMLOCK, &limit) == 0);
    REQUIRE(limit.rlim_cur == (4u << 20));
    REQUIRE_FALSE(has_ipc_lock());

    SECTION("the default builder's 4 MiB chunk passes the limit") {
        builder b = test_builder();
        try {
            sync_wait(round_trip(b));
            FAIL("a 4 MiB registration passed a 4 MiB limit with pages already pinned");
        } catch (const verbs_error& e) {
            INFO(e.what());
            CHECK(e.code() == errc::memlock_limit);
            CHECK(e.code() == std::errc::not_enough_memory);
            CHECK_THAT(e.what(), Catch::Contains("ibv_reg_mr(length=4194304") &&
                                     Catch::Contains("RLIMIT_MEMLOCK) is 4096 KiB") &&
                                     Catch::Contains("ulimit -l") && Catch::Contains("LimitMEMLOCK=infinity") &&
                                     Catch::Contains("--ulimit memlock") && Catch::Contains("builder::pool_chunk_size"));
        }
    }
    SECTION("with 64 KiB chunks the same connection carries data") {
        builder b = test_builder();
        b.pool_chunk_size(64 << 10);
        CHECK(sync_wait(round_trip(b)) == "bytes that crossed rxe under a small memlock limit");
    }
}
