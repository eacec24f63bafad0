// The agent under pressure, over real rxe connections on both transports:
// bursts of agent messages (flow control instead of receiver-not-ready
// waits), calls to a peer whose agent stopped answering (deadlines and
// stop tokens), and quotas that hold per peer host across connections.

#include <signal.h>

#include <chrono>
#include <cstring>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>
#include "agent/agent.hpp"
#include "engine/connection_state.hpp"

#include "support/peer_process.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;
using test::peer_process;

namespace {

constexpr access_flags read_write = access_flags::remote_read | access_flags::remote_write;

const char* name_of(endpoint_exchange how) { return how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"; }

// Regions `conn`'s agent has granted to its peer, read on its listener thread.
std::size_t grants_of(const connection& conn) {
    return sync_wait([&]() -> task<std::size_t> {
        co_await conn.event_listener()->schedule();
        co_return detail::agent_of(*detail::connection_access::state(conn))->granted_regions();
    }());
}

template <class F>
bool eventually(F condition, std::chrono::seconds limit = 20s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct pair_fixture {
    builder b;
    listener l;
    connection server;
    connection client;

    explicit pair_fixture(endpoint_exchange how, agent_limits limits = {}) {
        b.exchange(how);
        b.agent_limits(limits);
        l = b.listen(test::test_address() + ":0");
        std::tie(server, client) = sync_wait(when_all(l.accept(), b.connect(l.address())));
    }
};

}  // namespace

TEST_CASE("1,000 releases at once, then a request: milliseconds, not receiver-not-ready waits", "[agent_flow]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("over " << name_of(how));
    agent_limits limits;
    limits.max_regions = 2000;
    limits.max_peer_regions = 2000;
    pair_fixture f(how, limits);

    std::vector<remote_mr> held = sync_wait([&]() -> task<std::vector<remote_mr>> {
        std::vector<remote_mr> out;
        // Leases of 10 minutes: under ASan on two busy cores 1,000 requests
        // can outlast the default 30 s, and a lease that ends drops its grant.
        for (int i = 0; i < 1000; ++i)
            out.push_back(co_await f.client.request_remote_mr(64, 64, 10min));
        co_return out;
    }());
    REQUIRE(grants_of(f.server) == 1000);

    auto start = std::chrono::steady_clock::now();
    held.clear();
    remote_mr next = sync_wait(f.client.request_remote_mr(64));
    double took = seconds_since(start);
    INFO("1,000 releases and a request took " << took << " s");
    CHECK(took < 2.0);
    CHECK(next.size() == 64);
    // Every release arrived: the owner holds only the last grant.
    CHECK(eventually([&] { return grants_of(f.server) == 1; }));
    CHECK_FALSE(f.client.is_broken());
    CHECK_FALSE(f.server.is_broken());
}

TEST_CASE("a burst of grants flows while the receiver is not receiving, and arrives in order", "[agent_flow]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("over " << name_of(how));
    pair_fixture f(how);
    constexpr int count = 200;
    auto pool = f.b.pool();
    local_mr memory = pool->allocate(count * 64);
    for (int i = 0; i < count; ++i)
        std::memset(memory.data() + i * 64, i, 64);

    auto start = std::chrono::steady_clock::now();
    sync_wait([&]() -> task<void> {
        for (int i = 0; i < count; ++i)
            co_await f.server.send_local_mr(memory.slice(i * 64, 64), 60s, access_flags::remote_read);
    }());
    INFO(count << " grants sent in " << seconds_since(start) << " s");
    CHECK(seconds_since(start) < 10.0);

    local_mr into = pool->allocate(64);
    int in_order = 0;
    sync_wait([&]() -> task<void> {
        for (int i = 0; i < count; ++i) {
            remote_mr region = co_await f.client.receive_remote_mr();
            co_await f.client.read(into.all(), region.all());
            bool right = true;
            for (int k = 0; k < 64; ++k)
                right = right && into.data()[k] == static_cast<std::byte>(i);
            in_order += right ? 1 : 0;
        }
    }());
    CHECK(in_order == count);
}

TEST_CASE("agent calls to a stopped peer fail within their deadline; the connection stays up", "[agent_flow][process]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("over " << name_of(how));
    builder b;
    b.exchange(how);
    b.agent_timeout(700ms);
    listener l = b.listen(test::test_address() + ":0");
    std::vector<std::string> args{"sleep", l.address()};
    if (how == endpoint_exchange::tcp)
        args.push_back("tcp");
    peer_process peer(args);
    connection conn = sync_wait(l.accept());
    agent_call patient;  // a process just started, or just woken, on a loaded machine may need a moment
    patient.timeout = 20s;
    {
        // Answered once the peer's agent is up (its control QP follows the data QP).
        remote_mr warm_up = sync_wait(conn.request_remote_mr(64, 64, {}, read_write, patient));
        CHECK(warm_up.size() == 64);
    }
    peer.stop();

    SECTION("a request past its own deadline, then the builder's default on a receive") {
        auto start = std::chrono::steady_clock::now();
        agent_call one_second;
        one_second.timeout = 1s;
        CHECK_THROWS_MATCHES(sync_wait(conn.request_remote_mr(64, 64, {}, read_write, one_second)), timed_out_error,
                             Catch::Matchers::Predicate<timed_out_error>([&](const timed_out_error& e) {
                                 std::string w = e.what();
                                 return e.code() == std::errc::timed_out &&
                                        w.find("request_remote_mr to " + conn.peer()) == 0 &&
                                        w.find("timed out after 1000 ms waiting for the peer's answer") != w.npos &&
                                        w.find("connection stays up") != w.npos;
                             }, "names the call, the peer, the limit and the outcome"));
        double took = seconds_since(start);
        INFO("timed out after " << took << " s");
        CHECK(took >= 0.99);
        CHECK(took < 4.0);

        start = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH(sync_wait(conn.receive_remote_mr()),
                          Catch::Contains("receive_remote_mr to " + conn.peer()) &&
                              Catch::Contains("timed out after 700 ms"));
        took = seconds_since(start);
        CHECK(took >= 0.69);
        CHECK(took < 4.0);
    }
    SECTION("a stop token ends a wait at once, from any thread") {
        std::stop_source stopped;
        stopped.request_stop();
        agent_call call;
        call.stop = stopped.get_token();
        call.timeout = agent_call::forever;
        CHECK_THROWS_AS(sync_wait(conn.receive_local_mr(call)), operation_cancelled);

        std::stop_source later;
        call.stop = later.get_token();
        auto start = std::chrono::steady_clock::now();
        std::jthread stopper([&] {
            std::this_thread::sleep_for(200ms);
            later.request_stop();
        });
        CHECK_THROWS_AS(sync_wait(conn.request_remote_mr(64, 64, {}, read_write, call)), operation_cancelled);
        CHECK(seconds_since(start) < 4.0);
    }
    SECTION("grants wait for room once the peer stops reading, then time out waiting to send") {
        // The peer's kernel still acknowledges RC sends into its posted
        // receives, but its agent re-posts nothing: after at most a window
        // of messages this side has to wait.
        local_mr memory = b.pool()->allocate(64 * 64);
        agent_call quick;
        quick.timeout = 1s;
        int granted = 0;
        std::string error;
        for (int i = 0; i < 64 && error.empty(); ++i) {
            try {
                sync_wait(conn.send_local_mr(memory.slice(i * 64, 64), 60s, read_write, quick));
                ++granted;
            } catch (const timed_out_error& e) {
                error = e.what();
            }
        }
        INFO(granted << " grants went out; then: " << error);
        CHECK(granted >= 1);
        CHECK(granted <= 16);
        CHECK_THAT(error, Catch::Contains("send_local_mr to " + conn.peer()) && Catch::Contains("waiting to send") &&
                              Catch::Contains("Nothing was granted"));
    }

    // The peer wakes up, answers whatever it missed, and the connection
    // works as before: nothing timed out broke it.
    REQUIRE(kill(peer.pid, SIGCONT) == 0);
    remote_mr after = sync_wait(conn.request_remote_mr(128, 64, {}, read_write, patient));
    CHECK(after.size() == 128);
    CHECK_FALSE(conn.is_broken());
}

TEST_CASE("agent deadlines refuse nonsense by name", "[agent_flow]") {
    builder b;
    CHECK_THROWS_MATCHES(b.agent_timeout(0ms), std::invalid_argument,
                         Catch::Matchers::Message("builder::agent_timeout(0 ms): must be positive "
                                                  "(agent_call::forever for no deadline)"));
    CHECK_THROWS_AS(b.agent_timeout(-5ms), std::invalid_argument);
    pair_fixture f(endpoint_exchange::rdma_cm);
    agent_call negative;
    negative.timeout = -1ms;
    CHECK_THROWS_WITH(sync_wait(f.client.receive_remote_mr(negative)),
                      Catch::Contains("connection::receive_remote_mr") && Catch::Contains("negative"));
}

TEST_CASE("quotas hold per peer host, over all its connections", "[agent_flow]") {
    agent_limits limits;
    limits.max_peer_regions = 3;
    limits.max_peer_total_bytes = 3 * 4096;
    pair_fixture f(endpoint_exchange::rdma_cm, limits);
    auto [server2, client2] = sync_wait(when_all(f.l.accept(), f.client.new_connection()));

    remote_mr a1 = sync_wait(f.client.request_remote_mr(4096));
    remote_mr a2 = sync_wait(f.client.request_remote_mr(64));
    remote_mr b1 = sync_wait(client2.request_remote_mr(64));
    // Each connection is far below its own limits (64 regions, 256 MiB);
    // the host as a whole is at its 3 regions.
    CHECK_THROWS_MATCHES(sync_wait(client2.request_remote_mr(64)), std::system_error,
                         Catch::Matchers::Predicate<std::system_error>([](const std::system_error& e) {
                             std::string w = e.what();
                             return e.code() == std::errc::too_many_files_open &&
                                    w.find("agent_limits::max_peer_regions") != w.npos &&
                                    w.find(test::test_address()) != w.npos;
                         }, "too_many_files_open naming max_peer_regions and the host"));
    // Bytes: 4096 + 64 + 64 held; 8192 more would pass 12 KiB.
    a2 = remote_mr{};
    CHECK(eventually([&] { return grants_of(f.server) == 1; }));
    CHECK_THROWS_WITH(sync_wait(client2.request_remote_mr(8192)), Catch::Contains("agent_limits::max_peer_total_bytes"));
    // Room again once the host gives some back.
    a1 = remote_mr{};
    CHECK(eventually([&] { return grants_of(f.server) == 0; }));
    remote_mr b2 = sync_wait(client2.request_remote_mr(8192));
    CHECK(b2.size() == 8192);
    CHECK_FALSE(f.client.is_broken());
    CHECK_FALSE(client2.is_broken());
}
