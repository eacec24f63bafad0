// cordma against programs that are not cordma, over plain RC connections
// (builder::agent(false)): rdmacm-utils' rdma_server and rdma_client, and
// perftest's `ib_send_bw -R` in both roles, each a separate process with a
// time limit (tests/support/child_process.hpp). Real bytes over the device.

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <system_error>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/child_process.hpp"
#include "support/deadline.hpp"
#include "support/perftest_send_bw.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;

namespace {

// Each test its own port: an rdma_cm port is free again as soon as its id
// is destroyed, but a peer still exiting must not meet the next test.
constexpr int rdma_server_port = 17471;
constexpr int rdma_client_port = 17472;
constexpr int agent_mismatch_port = 17473;
constexpr int send_bw_server_port = 17474;
constexpr int send_bw_client_port = 17475;

builder plain_builder() {
    builder b;
    b.device(test::test_device_name()).agent(false).connect_timeout(30s);
    return b;
}

std::string at(int port) { return test::test_address() + ":" + std::to_string(port); }

// The 16-byte ping-pong of rdma_server and rdma_client: each sends its
// static (all-zero) 16-byte buffer and receives 16 bytes.
task<std::string> ping_pong(connection conn, std::shared_ptr<memory_pool> pool, bool send_first) {
    local_mr in = pool->allocate(64);
    local_mr out = pool->allocate(16);
    std::memcpy(out.data(), "cordma says hi!", 16);
    recv_result got;
    if (send_first) {
        auto [r, sent] = co_await when_all(conn.recv(in.all()), conn.send(out.all()));
        (void)sent;
        got = r;
    } else {
        got = co_await conn.recv(in.all());
        co_await conn.send(out.all());
    }
    co_return std::string(reinterpret_cast<const char*>(in.data()), got.length);
}

bool all_zero(const std::string& bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

// perftest's result line for SIZE and ITERS: " 4096  100  ..." (bytes, iterations, ...).
bool has_report_line(const std::string& output, std::size_t size, std::size_t iters) {
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string bytes, iterations;
        if (fields >> bytes >> iterations && bytes == std::to_string(size) && iterations == std::to_string(iters))
            return true;
    }
    return false;
}

void check_perftest_conversation(const test::perftest_run& run) {
    INFO("perftest sent version '" << run.peer_version << "', page size " << run.peer_page_size
                                   << ", cache line " << run.peer_cache_line << ", MTU code '" << run.peer_mtu << "'");
    // perftest refuses peers older than 5.70 and says so; Debian 12's is 6.06.
    CHECK(std::atof(run.peer_version.c_str()) >= 5.70);
    CHECK(run.peer_page_size == 4096);
    CHECK(run.peer_cache_line > 0);
    CHECK(run.peer_mtu.size() == 1);
    REQUIRE(run.peer_dests.size() == 7);
    // Before send_set_up_connection the pingpong_dests are zeros; after, the
    // data QP's: its QPN is the one rdma_cm connected cordma's data QP to.
    CHECK(run.peer_dests[0].qpn == 0);
    CHECK(run.peer_dests[1].qpn == 0);
    for (std::size_t i = 2; i < run.peer_dests.size(); ++i) {
        INFO("pingpong_dest " << i);
        CHECK(run.peer_dests[i].qpn == run.data_dest_qpn);
        CHECK(run.peer_dests[i].lid == 0);  // RoCE
    }
}

}  // namespace

TEST_CASE("a plain cordma client talks to rdmacm-utils' rdma_server", "[interop]") {
    test::child_process server({"rdma_server", "-p", std::to_string(rdma_server_port)}, 60s);
    builder b = plain_builder();
    b.private_data("from cordma");  // rdma_server ignores it; it must not mind it
    auto pool = b.pool();
    std::string got = sync_wait([&]() -> task<std::string> {
        connection conn = co_await b.connect(at(rdma_server_port));  // retried until rdma_server listens
        CHECK_FALSE(conn.has_agent());
        co_return co_await ping_pong(conn, pool, true);
    }());
    auto result = server.finish();
    INFO(result.describe());
    CHECK(got.size() == 16);
    CHECK(all_zero(got));
    CHECK(result.exited_ok());
    CHECK_THAT(result.output, Catch::Contains("rdma_server: end 0"));
}

TEST_CASE("rdmacm-utils' rdma_client talks to a plain cordma listener", "[interop]") {
    builder b = plain_builder();
    b.private_data("cordma accepts");
    listener l = b.listen(at(rdma_client_port));
    test::child_process client({"rdma_client", "-s", test::test_address(), "-p", std::to_string(rdma_client_port)},
                               60s);
    auto pool = b.pool();
    test::deadline limit(60s);
    connection conn;
    try {
        conn = sync_wait(l.accept(limit.token()));
    } catch (const std::exception& e) {
        client.kill();
        FAIL("accepting rdma_client failed: " << e.what() << "\n" << client.finish().describe());
    }
    CHECK_FALSE(conn.has_agent());
    // rdma_client connects with no private data: the CM delivers its
    // connect request's 56 bytes, all zero.
    auto peer_data = conn.peer_private_data();
    CHECK(peer_data.size() == max_connect_private_data);
    CHECK(std::all_of(peer_data.begin(), peer_data.end(), [](std::byte x) { return x == std::byte{0}; }));
    std::string got = sync_wait(ping_pong(conn, pool, false));
    auto result = client.finish();
    INFO(result.describe());
    CHECK(got.size() == 16);
    CHECK(all_zero(got));
    CHECK(result.exited_ok());
    CHECK_THAT(result.output, Catch::Contains("rdma_client: end 0"));
}

TEST_CASE("a cordma client with the agent fails at once, naming the setting, against rdma_server", "[interop]") {
    test::child_process server({"rdma_server", "-p", std::to_string(agent_mismatch_port)}, 60s);
    builder b;
    b.device(test::test_device_name()).connect_timeout(30s);  // the agent on, as by default
    auto started = std::chrono::steady_clock::now();
    try {
        sync_wait(b.connect(at(agent_mismatch_port)));
        FAIL("connected to rdma_server with the agent on");
    } catch (const std::system_error& e) {
        CHECK(e.code() == std::errc::protocol_not_supported);
        CHECK_THAT(e.what(), Catch::Contains("not a cordma listener") && Catch::Contains("builder::agent(false)"));
    }
    // Not the connect timeout: as soon as rdma_server accepted without cordma's reply.
    CHECK(std::chrono::steady_clock::now() - started < 20s);
    server.kill();
    (void)server.finish();
}

TEST_CASE("cordma speaks perftest's protocol as the client of ib_send_bw -R", "[interop]") {
    constexpr std::size_t size = 4096, iters = 100;
    // -F: report even when perftest cannot calibrate its cycle counter (its
    // r^2 check fails while other processes keep the cores busy, and it
    // then exits 1 with "Can't produce a report"); the bandwidth figures
    // are not what this test checks.
    test::child_process server({"ib_send_bw", "-R", "-F", "-d", test::test_device_name().empty() ? "rxe0" : test::test_device_name(),
                                "-p", std::to_string(send_bw_server_port), "-s", std::to_string(size), "-n",
                                std::to_string(iters)},
                               120s);
    builder b = plain_builder();
    test::perftest_run run;
    try {
        run = sync_wait(test::run_send_bw_client(b, at(send_bw_server_port), size, iters));
    } catch (const std::exception& e) {
        server.kill();
        FAIL("cordma's side failed: " << e.what() << "\n" << server.finish().describe());
    }
    auto result = server.finish();
    INFO(result.describe());
    check_perftest_conversation(run);
    CHECK(run.sent == iters);
    CHECK(result.exited_ok());
    CHECK(has_report_line(result.output, size, iters));
}

TEST_CASE("cordma speaks perftest's protocol as the server of ib_send_bw -R", "[interop]") {
    constexpr std::size_t size = 4096, iters = 100;
    builder b = plain_builder();
    b.recv_queue_depth(iters);  // every message's receive posted before perftest sends
    listener l = b.listen(at(send_bw_client_port));
    test::child_process client({"ib_send_bw", "-R", "-F", "-d", test::test_device_name().empty() ? "rxe0" : test::test_device_name(),
                                "-p", std::to_string(send_bw_client_port), "-s", std::to_string(size), "-n",
                                std::to_string(iters), test::test_address()},
                               120s);
    test::perftest_run run;
    test::deadline limit(120s);
    try {
        run = sync_wait(test::run_send_bw_server(l, b.pool(), size, iters, limit.token()));
    } catch (const std::exception& e) {
        client.kill();
        FAIL("cordma's side failed: " << e.what() << "\n" << client.finish().describe());
    }
    auto result = client.finish();
    INFO(result.describe());
    check_perftest_conversation(run);
    REQUIRE(run.received.size() == iters);
    CHECK(std::count(run.received.begin(), run.received.end(), size) == static_cast<long>(iters));
    CHECK(result.exited_ok());
    CHECK(has_report_line(result.output, size, iters));
}
