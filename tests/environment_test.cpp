// What a new user's host gets wrong, tried on a real device: an address no
// route or no host answers, a TCP exchange error compared with std::errc,
// and (run by tests/environment_memlock.sh without CAP_IPC_LOCK under a
// 4 MiB limit) the locked-memory error and the builder setting that gets
// past it (the pool's registration size, whose own tests are in
// memory_pool_test.cpp).

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/pool_round_trip.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::round_trip;
using test::test_builder;
using namespace std::chrono_literals;

namespace {

/// An address on the test device's own /24 that no host has (the VMs use
/// .1 to .4): ARP gets no answer, so the kernel reports it unreachable.
std::string silent_neighbour() {
    std::string a = test::test_address();
    return a.substr(0, a.rfind('.')) + ".213";
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
        // An application that has registered anything of its own (here 64
        // KiB) leaves the pool's first 4 MiB chunk no room under a 4 MiB
        // limit. (cordma itself pins nothing before that chunk: a
        // connection's atomic-result words are made by its first atomic.)
        std::vector<std::byte> own(64 << 10);
        local_mr pinned = register_local_mr(b.pd(), own.data(), own.size(), access_flags::local_write);
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
