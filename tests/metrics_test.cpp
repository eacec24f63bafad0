// Metrics over real rxe connections (metrics.hpp): every operation kind
// issued a known number of times and read back exactly, waits for a full
// send queue, a failed write counted by its status, the registry's live
// and closed totals per builder and per peer host (over rdma_cm and the
// TCP exchange), and the Prometheus
// rendering checked by promtool (Debian's prometheus package, which
// tools/install-deps installs).

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <array>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/device.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/listener.hpp>
#include <cordma/metrics.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/loopback_pair.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;

namespace {

constexpr std::uint64_t rounds = 25;

struct fixture {
    explicit fixture(qp_capacity capacity = {})
        : el(event_listener::start(test::open_test_device())),
          pool(memory_pool::create(protection_domain::create(el->device()))) {
        std::tie(client, server) = test::adopted_pair(el, pool->pd(), capacity);
    }
    /// A plain connection from a builder to its own listener, over `how`.
    explicit fixture(endpoint_exchange how) : b(std::make_unique<builder>()) {
        b->device(test::test_device_name()).exchange(how).agent(false);
        l = std::make_unique<listener>(b->listen(any_port()));
        std::tie(server, client) = sync_wait(when_all(l->accept(), b->connect(l->address())));
        el = b->event_listener();
        pool = memory_pool::create(b->pd());
    }
    std::unique_ptr<builder> b;  // (builder connections only)
    std::unique_ptr<listener> l;
    std::shared_ptr<event_listener> el;
    std::shared_ptr<memory_pool> pool;
    connection client;
    connection server;
};

// Every kind, `rounds` times each, one after another; returns the bytes
// the server's receives reported.
task<std::uint64_t> every_kind(fixture& f, local_mr& out, local_mr& in, local_mr& target, local_mr& words) {
    std::uint64_t received = 0;
    for (std::uint64_t i = 0; i < rounds; ++i) {
        auto [got, sent] = co_await when_all(f.server.recv(in.slice(0, 4096)), f.client.send(out.slice(0, 64)));
        (void)sent;
        received += got.length;
    }
    for (std::uint64_t i = 0; i < rounds; ++i) {
        auto [got, sent] = co_await when_all(f.server.recv(in.slice(0, 4096)),
                                             f.client.send_with_imm(out.slice(0, 32), static_cast<std::uint32_t>(i)));
        (void)sent;
        received += got.length;
    }
    for (std::uint64_t i = 0; i < rounds; ++i) {
        auto [got, sent] = co_await when_all(
            f.server.recv_imm(),
            f.client.write_with_imm(out.slice(0, 100), target.remote().slice(0, 100), static_cast<std::uint32_t>(i)));
        (void)sent;
        received += got.length;
    }
    for (std::uint64_t i = 0; i < rounds; ++i)
        co_await f.client.write(out.slice(0, 200), target.remote().slice(0, 200));
    for (std::uint64_t i = 0; i < rounds; ++i)
        co_await f.client.read(in.slice(0, 300), target.remote().slice(0, 300));
    for (std::uint64_t i = 0; i < rounds; ++i)
        co_await f.client.fetch_add(words.remote().slice(0, 8), 1);
    for (std::uint64_t i = 0; i < rounds; ++i)
        co_await f.client.compare_swap(words.remote().slice(8, 8), i, i + 1);
    co_return received;
}

task<void> write_one(connection& c, local_slice from, remote_slice to) { co_await c.write(from, to); }

void check_kind(const connection_counters& c, operation_kind kind, std::uint64_t n, std::uint64_t bytes) {
    INFO("kind " << name(kind));
    CHECK(c[kind].posted == n);
    CHECK(c[kind].completed == n);
    CHECK(c[kind].failed == 0);
    CHECK(c[kind].bytes == bytes);
}

// Writes `text` to a file and runs `command` on it; its exit status and output.
std::pair<int, std::string> run_on(const std::string& text, const std::string& command) {
    char path[] = "/tmp/cordma-metrics-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
    std::string line = command + " < " + path + " 2>&1";
    FILE* p = popen(line.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string output;
    char buf[512];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
        output.append(buf, n);
    int status = pclose(p);
    unlink(path);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace

TEST_CASE("every operation kind is counted exactly, on both ends", "[metrics]") {
    // Connected three ways: two QPs joined in the process (adopted), and
    // builder connections over rdma_cm and over the TCP exchange.
    const int how = GENERATE(0, 1, 2);
    INFO((how == 0 ? "adopted" : how == 1 ? "rdma_cm" : "tcp exchange"));
    fixture f = how == 0 ? fixture() : fixture(how == 1 ? endpoint_exchange::rdma_cm : endpoint_exchange::tcp);
    local_mr out = f.pool->allocate(4096);
    local_mr in = f.pool->allocate(4096);
    local_mr target = f.pool->allocate(4096);
    local_mr words = f.pool->allocate(16);
    std::memset(words.data(), 0, 16);

    std::uint64_t received = sync_wait(every_kind(f, out, in, target, words));

    connection_counters c = f.client.counters();
    check_kind(c, operation_kind::send, rounds, rounds * 64);
    check_kind(c, operation_kind::send_with_imm, rounds, rounds * 32);
    check_kind(c, operation_kind::write_with_imm, rounds, rounds * 100);
    check_kind(c, operation_kind::write, rounds, rounds * 200);
    check_kind(c, operation_kind::read, rounds, rounds * 300);
    check_kind(c, operation_kind::fetch_add, rounds, rounds * 8);
    check_kind(c, operation_kind::compare_swap, rounds, rounds * 8);
    check_kind(c, operation_kind::recv, 0, 0);
    CHECK(c.work_requests == 7 * rounds);
    CHECK(c.doorbells >= 1);
    CHECK(c.doorbells <= c.work_requests);
    // One completion per request that asked for one, every one a success.
    CHECK(c.completions_reaped() == c.signalled);
    CHECK(c.completions[0] == c.signalled);
    CHECK(c.send_waits == 0);

    connection_counters s = f.server.counters();
    CHECK(received == rounds * (64 + 32 + 100));
    check_kind(s, operation_kind::recv, 3 * rounds, received);
    check_kind(s, operation_kind::send, 0, 0);
    CHECK(s.work_requests == 0);
    CHECK(s.completions[0] == 3 * rounds);
    CHECK(s.completions_reaped() == 3 * rounds);

    // The event listener's snapshot holds both, by name, with the same counts.
    metrics_snapshot m = f.el->metrics();
    REQUIRE(m.connections.size() == 2);
    CHECK(m.opened == 2);
    CHECK(m.gone == 0);
    connection_counters total = m.total();
    CHECK(total[operation_kind::write].completed == rounds);
    CHECK(total[operation_kind::recv].completed == 3 * rounds);
    CHECK(total.completions[0] == c.signalled + 3 * rounds);
}

TEST_CASE("every operation's latency lands in its kind's histogram, and a reset starts them afresh", "[metrics]") {
    fixture f;
    local_mr out = f.pool->allocate(4096);
    local_mr in = f.pool->allocate(4096);
    local_mr target = f.pool->allocate(4096);
    local_mr words = f.pool->allocate(16);
    std::memset(words.data(), 0, 16);

    auto began = std::chrono::steady_clock::now();
    sync_wait(every_kind(f, out, in, target, words));
    double wall_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - began).count();

    metrics_snapshot m = f.el->metrics();
    double timed_ns = 0;
    for (std::size_t k = 0; k < operation_kinds; ++k) {
        auto kind = static_cast<operation_kind>(k);
        const latency_histogram& h = m.latency_of(kind);
        INFO("kind " << name(kind) << ": p50 " << h.quantile_ns(0.5) << " ns, p99 " << h.quantile_ns(0.99)
                     << " ns, max " << h.max_ns() << " ns");
        if (kind == operation_kind::recv) {
            CHECK(h.count() == 0);  // receives are not timed
            continue;
        }
        CHECK(h.count() == rounds);
        CHECK(h.quantile_ns(0.5) <= h.quantile_ns(0.9));
        CHECK(h.quantile_ns(0.9) <= h.quantile_ns(0.99));
        CHECK(h.quantile_ns(0.99) <= h.max_ns());
        // An RDMA round trip on rxe takes microseconds: a tick read as a
        // nanosecond (or a second) would put these far off.
        CHECK(h.quantile_ns(0.5) > 500);
        CHECK(h.max_ns() < 10e9);
        timed_ns += h.sum_ns();
    }
    // One operation at a time (each send beside its receive): their times
    // add up to no more than the run's, measured by the steady clock.
    CHECK(timed_ns > 0);
    CHECK(timed_ns <= wall_ns * 1.01);

    // The process's figures hold this listener's.
    CHECK(process_metrics().latency_of(operation_kind::write).count() >= rounds);

    f.el->reset_latency();
    metrics_snapshot after_reset = f.el->metrics();
    for (const latency_histogram& h : after_reset.latency) {
        CHECK(h.count() == 0);
        CHECK(h.max_ns() == 0);
    }
    CHECK(after_reset.total()[operation_kind::write].completed == rounds);  // counters go on
    sync_wait([&]() -> task<void> {
        for (int i = 0; i < 10; ++i)
            co_await f.client.write(out.slice(0, 64), target.remote().slice(0, 64));
    }());
    metrics_snapshot later = f.el->metrics();
    CHECK(later.latency_of(operation_kind::write).count() == 10);
    CHECK(later.latency_of(operation_kind::read).count() == 0);
    CHECK(later.latency_of(operation_kind::write).max_ns() > 0);
    CHECK(later.total()[operation_kind::write].completed == rounds + 10);
}

TEST_CASE("receives that find the receive queue full wait, each counted once", "[metrics]") {
    qp_capacity capacity;
    capacity.max_recv_wr = 4;
    fixture f(capacity);
    local_mr in = f.pool->allocate(10 * 64);
    local_mr out = f.pool->allocate(64);
    std::memset(out.data(), 7, 64);

    // The sender sends only when the server has a receive posted for the
    // message (its posted count, written after ibv_post_recv): no
    // receiver-not-ready retry, however the threads run. Whatever stops it
    // (a send failing, 30 s without the receive it waits for) shuts the
    // server's connection down, so the receives fail instead of waiting.
    std::string sender_failed;
    std::thread sender([&] {
        try {
            for (std::uint64_t sent = 0; sent < 10; ++sent) {
                auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
                while (f.server.counters()[operation_kind::recv].posted < sent + 1) {
                    if (std::chrono::steady_clock::now() > until)
                        throw std::runtime_error("receive " + std::to_string(sent + 1) + " never posted within 30 s");
                    std::this_thread::yield();
                }
                sync_wait(f.client.send(out.slice(0, 64)));
            }
        } catch (const std::exception& e) {
            sender_failed = e.what();
            f.server.shut_down();
        }
    });
    // Ten receives started at once on the event listener thread: four take
    // the receive queue's four entries, six wait for one.
    std::uint64_t got = 0;
    std::string receiver_failed;
    try {
        got = sync_wait([](fixture& f, local_mr& in) -> task<std::uint64_t> {
            co_await f.el->schedule();
            std::vector<task<std::size_t>> receives;
            for (std::size_t i = 0; i < 10; ++i)
                receives.push_back([](connection& c, local_slice into) -> task<std::size_t> {
                    recv_result r = co_await c.recv(into);
                    co_return r.length;
                }(f.server, in.slice(i * 64, 64)));
            std::vector<std::size_t> lengths = co_await when_all(std::move(receives));
            std::uint64_t sum = 0;
            for (std::size_t n : lengths)
                sum += n;
            co_return sum;
        }(f, in));
    } catch (const std::exception& e) {
        receiver_failed = e.what();
        f.client.shut_down();  // a sender waiting on a send fails too
    }
    sender.join();
    REQUIRE(sender_failed.empty());
    REQUIRE(receiver_failed.empty());
    CHECK(got == 10 * 64);
    connection_counters c = f.server.counters();
    CHECK(c.recv_waits == 6);
    check_kind(c, operation_kind::recv, 10, 10 * 64);
    CHECK(f.client.counters().send_waits == 0);
}

TEST_CASE("waits for a full send queue and a failed write are counted, by status", "[metrics]") {
    qp_capacity capacity;
    capacity.max_send_wr = 4;
    fixture f(capacity);
    local_mr sources = f.pool->allocate(16 * 8);
    local_mr target = f.pool->allocate(16 * 8);

    // Sixteen writes started at once on the event listener thread: four
    // take the send queue's four entries, twelve wait for one.
    sync_wait([](fixture& f, local_mr& sources, local_mr& target) -> task<void> {
        co_await f.el->schedule();
        std::vector<task<void>> writes;
        for (std::size_t i = 0; i < 16; ++i)
            writes.push_back(write_one(f.client, sources.slice(i * 8, 8), target.remote().slice(i * 8, 8)));
        co_await when_all(std::move(writes));
    }(f, sources, target));
    connection_counters c = f.client.counters();
    CHECK(c.send_waits == 12);
    check_kind(c, operation_kind::write, 16, 16 * 8);

    // A forged key: the write fails with a remote access error, the
    // connection breaks, and the snapshot says why.
    remote_slice forged = target.remote().slice(0, 8);
    forged.rkey ^= 0x5a5a00;
    int status = sync_wait([](fixture& f, local_mr& sources, remote_slice to) -> task<int> {
        try {
            co_await f.client.write(sources.slice(0, 8), to);
            co_return IBV_WC_SUCCESS;
        } catch (const work_completion_error& e) {
            co_return static_cast<int>(e.status());
        }
    }(f, sources, forged));
    CHECK(status == IBV_WC_REM_ACCESS_ERR);
    c = f.client.counters();
    CHECK(c[operation_kind::write].posted == 17);
    CHECK(c[operation_kind::write].completed == 16);
    CHECK(c[operation_kind::write].failed == 1);
    CHECK(c.completions[IBV_WC_REM_ACCESS_ERR] == 1);
    CHECK(std::string(completion_status_name(IBV_WC_REM_ACCESS_ERR)) == "rem_access_err");

    metrics_snapshot m = f.el->metrics();
    REQUIRE(m.connections.size() == 2);
    const connection_metrics& mine = m.connections[0].qp_num == f.client.qp()->qp_num() ? m.connections[0]
                                                                                          : m.connections[1];
    CHECK(mine.peer == "server");
    CHECK(mine.role == "data");
    CHECK(mine.broken);
    CHECK_THAT(mine.broken_reason, Catch::Contains("remote access error") || Catch::Contains("REM_ACCESS"));
    CHECK(mine.cause == disconnect_cause::failed_completion);
    CHECK(m.disconnects == std::array<std::uint64_t, disconnect_causes>{0, 0, 1, 0});
    CHECK_THAT(to_prometheus(m), Catch::Contains("cordma_completions_total{status=\"rem_access_err\"} 1"));
}

TEST_CASE("a builder's metrics count live and closed connections, by peer host, for promtool", "[metrics]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("exchange " << (how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"));
    builder b;
    b.device(test::test_device_name()).exchange(how);
    CHECK(b.metrics().connections.empty());  // nothing opened yet
    listener l = b.listen(any_port());
    auto pool = b.pool();
    local_mr out = pool->allocate(4096);
    local_mr target = pool->allocate(4096);
    {
        auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
        sync_wait([](connection& c, local_mr& out, local_mr& target) -> task<void> {
            for (int i = 0; i < 10; ++i)
                co_await c.write(out.slice(0, 1000), target.remote().slice(0, 1000));
        }(client, out, target));

        metrics_snapshot m = b.metrics();
        // Each connection with the agent is two queue pairs, on each side.
        REQUIRE(m.connections.size() == 4);
        std::size_t agents = 0;
        for (const connection_metrics& c : m.connections)
            agents += c.role == "agent" ? 1 : 0;
        CHECK(agents == 2);
        auto hosts = m.by_peer_host();
        REQUIRE(hosts.size() == 1);  // client and server on one host
        std::string host = l.address().substr(0, l.address().rfind(':'));
        CHECK(hosts[0].first == host);
        CHECK(hosts[0].second[operation_kind::write].completed == 10);
        CHECK(hosts[0].second[operation_kind::write].bytes == 10000);

        // promtool accepts the rendering of a busy process, every series
        // included, and JSON parses.
        std::string page = to_prometheus(m, {.peer_hosts = true, .connections = true});
        CHECK_THAT(page, Catch::Contains("cordma_operations_completed_total{kind=\"write\"} 10"));
        CHECK_THAT(page, Catch::Contains("cordma_peer_operations_completed_total{host=\"" + host +
                                         "\",kind=\"write\"} 10"));
        auto [rc, said] = run_on(page, "promtool check metrics");
        INFO("promtool says: " << said);
        INFO("the page:\n" << page);
        CHECK(rc == 0);
        CHECK(said.empty());
        auto [jrc, jsaid] = run_on(to_json(m), "python3 -c 'import json,sys; d=json.load(sys.stdin); "
                                               "print(d[\"total\"][\"operations\"][\"write\"][\"completed\"], "
                                               "d[\"devices\"][0][\"device\"])'");
        CHECK(jrc == 0);
        CHECK(jsaid == "10 " + test::test_device_name() + "\n");

        // The device's own counters, read with the snapshot: its one port,
        // which carried those writes (rxe counts packets in hw_counters),
        // on the page as they were read.
        REQUIRE(m.devices.size() == 1);
        const device_counters& d = m.devices[0];
        CHECK(d.device == test::test_device_name());
        CHECK(d.port == 1);
        CHECK(d["sent_pkts"] + d["port_xmit_packets"] >= 10);
        CHECK(read_device_counters(*b.pd()->device(), 1)["sent_pkts"] >= d["sent_pkts"]);
        CHECK_THAT(page, Catch::Contains("\ncordma_device_events_total{device=\"" + d.device +
                                         "\",port=\"1\",counter=\"sent_pkts\"} " + std::to_string(d["sent_pkts"]) +
                                         "\n"));
    }
    // Both ends closed: their counts stay, in the closed totals. The
    // connections close on the event listener thread, after their handles
    // go; wait (bounded) for the registry to see it.
    metrics_snapshot m;
    for (int i = 0; i < 500; ++i) {
        m = b.metrics();
        if (m.connections.empty())
            break;
        usleep(10000);
    }
    CHECK(m.connections.empty());
    CHECK(m.opened == 4);
    CHECK(m.gone == 4);
    // Each queue pair's end counted once: closed by one side or the other
    // (which first is a race), none failed.
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::closed_here)] +
              m.disconnects[static_cast<std::size_t>(disconnect_cause::peer_closed)] ==
          4);
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::closed_here)] >= 1);
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::failed_completion)] == 0);
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::other)] == 0);
    CHECK(m.closed[operation_kind::write].completed == 10);
    CHECK(m.total()[operation_kind::write].bytes == 10000);
}
