// shared_receive_queue over real rxe connections: many clients' SENDs land
// in one SRQ (shown by each server QP's attributes), every message checked
// and in order per client, over rdma_cm and the TCP exchange; buffers
// posted again as messages are released; what is refused; a message too
// long breaks only its sender's connection; ended() reports clients that go;
// destroying the handle cancels what waits; the queue's own counters
// (messages, bytes, receives posted and failed, by status) exact.

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include <cordma/metrics.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "support/deadline.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using namespace std::chrono_literals;

namespace {

struct record {
    std::uint32_t client;
    std::uint32_t seq;
    std::uint64_t check;
};

std::uint64_t check_of(std::uint32_t client, std::uint32_t seq) {
    return (std::uint64_t(client) * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t(seq) * 0xC2B2AE3D27D4EB4Full);
}

// `clients` connections from `client_builder` to a listener of
// `server_builder`: the server's ends and the clients', in pairs.
task<std::pair<std::vector<connection>, std::vector<connection>>> connect_all(listener& l, builder& client_builder,
                                                                               int clients) {
    std::vector<connection> servers, ends;
    for (int i = 0; i < clients; ++i) {
        auto accepted = l.accept();
        auto connected = client_builder.connect(l.address());
        auto [s, c] = co_await when_all(std::move(accepted), std::move(connected));
        servers.push_back(std::move(s));
        ends.push_back(std::move(c));
    }
    co_return std::make_pair(std::move(servers), std::move(ends));
}

task<void> send_records(connection conn, std::shared_ptr<memory_pool> pool, std::uint32_t client, std::uint32_t count) {
    local_mr out = pool->allocate(sizeof(record) * 8);
    for (std::uint32_t seq = 0; seq < count; ++seq) {
        // Eight buffers in turn: a send's buffer is reused only after it
        // completed (each send is awaited).
        local_slice s = out.slice((seq % 8) * sizeof(record), sizeof(record));
        record r{client, seq, check_of(client, seq)};
        std::memcpy(s.data(), &r, sizeof r);
        co_await conn.send(s);
    }
}

// Takes `total` messages from the queue, checks each, and counts them per
// client, in order.
task<std::map<std::uint32_t, std::uint32_t>> drain(shared_receive_queue& srq, std::size_t total,
                                                   std::map<std::uint32_t, std::uint32_t> qp_to_client,
                                                   std::stop_token token) {
    std::map<std::uint32_t, std::uint32_t> next_seq;
    for (std::size_t i = 0; i < total; ++i) {
        received_message m = co_await srq.next(token);
        REQUIRE(m.size() == sizeof(record));
        record r;
        std::memcpy(&r, m.data(), sizeof r);
        REQUIRE(qp_to_client.count(m.qp_num()) == 1);
        REQUIRE(qp_to_client[m.qp_num()] == r.client);
        REQUIRE(r.seq == next_seq[r.client]);
        REQUIRE(r.check == check_of(r.client, r.seq));
        ++next_seq[r.client];
    }
    co_return next_seq;
}

void many_clients_one_queue(endpoint_exchange how) {
    constexpr int clients = 8;
    constexpr std::uint32_t per_client = 300;
    test::deadline limit(120s);
    builder server_builder;
    server_builder.exchange(how);
    // 8 senders share 16 buffers: when all are taken a sender waits one RNR
    // timer (the default, 655 ms, made a 45 s test in a busy CI VM).
    server_builder.min_rnr_timer(1);
    shared_receive_queue srq(server_builder, 16, 256);
    server_builder.shared_receives(srq);
    listener l = server_builder.listen(any_port());
    // The clients wait for room as long as it takes (rnr_retry 7): at 6
    // tries of 0.01 ms a server kept off the CPU by other processes (the
    // suite run with both cores busy) made a sender give up.
    builder client_builder;
    client_builder.exchange(how).rnr_retry(7);

    auto [servers, ends] = sync_wait(connect_all(l, client_builder, clients));
    REQUIRE(srq.connections() == clients);

    // One SRQ under every server QP, none under the clients'.
    std::map<std::uint32_t, std::uint32_t> qp_to_client;
    for (int i = 0; i < clients; ++i) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        REQUIRE(ibv_query_qp(servers[i].qp()->native_handle(), &attr, IBV_QP_STATE, &init) == 0);
        CHECK(init.srq == srq.native_handle());
        REQUIRE(ibv_query_qp(ends[i].qp()->native_handle(), &attr, IBV_QP_STATE, &init) == 0);
        CHECK(init.srq == nullptr);
        qp_to_client[servers[i].qp()->qp_num()] = static_cast<std::uint32_t>(i);
        CHECK(srq.peer_of(servers[i].qp()->qp_num()) == servers[i].peer());
    }

    // 8 x 300 messages through 16 buffers: each is posted again as soon as
    // its message is released.
    auto run = [&]() -> task<std::map<std::uint32_t, std::uint32_t>> {
        task_group senders;
        for (int i = 0; i < clients; ++i)
            senders.spawn(send_records(ends[i], client_builder.pool(), static_cast<std::uint32_t>(i), per_client));
        std::map<std::uint32_t, std::uint32_t> counts;
        std::exception_ptr failed;
        try {
            counts = co_await drain(srq, std::size_t(clients) * per_client, qp_to_client, limit.token());
        } catch (...) {
            failed = std::current_exception();  // the senders are joined first (a task_group must be)
            for (connection& c : ends)
                c.shut_down();
        }
        co_await senders.join();
        if (failed)
            std::rethrow_exception(failed);
        co_return counts;
    };
    auto counts = sync_wait(run());
    REQUIRE(counts.size() == clients);
    for (auto [client, n] : counts)
        CHECK(n == per_client);

    // Counted on the queue, exactly: every message delivered once, every
    // buffer posted again as its message was released, none failed.
    constexpr std::uint64_t messages = std::uint64_t(clients) * per_client;
    metrics_snapshot m = server_builder.metrics();
    REQUIRE(m.shared_receive_queues.size() == 1);
    const shared_receive_metrics& q = m.shared_receive_queues[0];
    CHECK(q.device == server_builder.pd()->device()->name());
    CHECK(q.size == 16);
    CHECK(q.buffer_size == 256);
    CHECK(q.connections == clients);
    CHECK(q.counters[operation_kind::recv].completed == messages);
    CHECK(q.counters[operation_kind::recv].bytes == messages * sizeof(record));
    CHECK(q.counters[operation_kind::recv].posted == 16 + messages);
    CHECK(q.counters[operation_kind::recv].failed == 0);
    CHECK(q.counters.completions[IBV_WC_SUCCESS] == messages);
    CHECK(q.counters.completions_reaped() == messages);
    CHECK(q.ready == 16);
    CHECK(q.fewest_ready < 16);
    // In the totals too, beside the connections' (whose own receives, all
    // through the queue, are 0).
    std::uint64_t on_connections = 0;
    for (const connection_metrics& c : m.connections)
        on_connections += c.counters[operation_kind::recv].completed;
    CHECK(m.total()[operation_kind::recv].completed == messages + on_connections);
    std::string page = to_prometheus(m);
    const std::string labels = "{device=\"" + q.device + "\",srq=\"" + std::to_string(q.id) + "\"} ";
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_messages_total" + labels + std::to_string(messages) + "\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_receives_ready" + labels + "16\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_connections" + labels + std::to_string(clients) + "\n"));
    CHECK_THAT(to_json(m), Catch::Contains("\"shared_receive_queues\": [{\"device\": \"" + q.device + "\", \"id\": " +
                                           std::to_string(q.id) + ", \"size\": 16, \"buffer_size\": 256"));
}

}  // namespace

TEST_CASE("many clients' sends land in one shared receive queue, in order per client", "[srq]") {
    SECTION("rdma_cm") { many_clients_one_queue(endpoint_exchange::rdma_cm); }
    SECTION("TCP exchange") { many_clients_one_queue(endpoint_exchange::tcp); }
}

TEST_CASE("a connection on a shared receive queue refuses its own receives, and settings that would do nothing",
          "[srq]") {
    test::deadline limit(60s);
    builder server_builder;
    shared_receive_queue srq(server_builder, 8, 128);
    server_builder.shared_receives(srq);
    listener l = server_builder.listen(any_port());
    builder client_builder;
    auto [servers, ends] = sync_wait(connect_all(l, client_builder, 1));
    connection& s = servers[0];

    local_mr in = server_builder.pool()->allocate(128);
    CHECK_THROWS_MATCHES(sync_wait([&]() -> task<void> { co_await s.recv(in.all()); }()), std::logic_error,
                         Catch::Matchers::Predicate<std::logic_error>([](const std::logic_error& e) {
                             return std::string(e.what()).find("shared_receive_queue") != std::string::npos;
                         }));
    CHECK_THROWS_WITH(receive_queue(s, 4, 128), Catch::Contains("shared_receive_queue"));

    // recv_queue_depth would size a receive queue the data QP does not have.
    builder deep = server_builder;
    deep.recv_queue_depth(64);
    CHECK_THROWS_WITH(deep.listen(any_port()), Catch::Contains("recv_queue_depth") &&
                                                   Catch::Contains("shared_receives"));
    // A queue from another builder is on another protection domain.
    builder other;
    other.shared_receives(srq);
    CHECK_THROWS_WITH(sync_wait(other.connect(l.address())), Catch::Contains("another builder"));
    CHECK_THROWS_WITH(other.listen(any_port()), Catch::Contains("another builder"));
    // The plain argument checks.
    CHECK_THROWS_AS(shared_receive_queue(server_builder, 0, 64), std::invalid_argument);
    CHECK_THROWS_AS(shared_receive_queue(server_builder, 4, 0), std::invalid_argument);
    CHECK_THROWS_WITH(shared_receive_queue(server_builder, 1u << 30, 64), Catch::Contains("max_srq_wr"));
    CHECK(shared_receive_queue::supported(server_builder));
}

TEST_CASE("a message longer than the buffers breaks only its sender; ended() reports clients that go", "[srq]") {
    test::deadline limit(60s);
    builder server_builder;
    shared_receive_queue srq(server_builder, 8, 64);
    server_builder.shared_receives(srq);
    listener l = server_builder.listen(any_port());
    builder client_builder;
    auto [servers, ends] = sync_wait(connect_all(l, client_builder, 3));
    auto pool = client_builder.pool();

    auto run = [&]() -> task<void> {
        // Client 0 sends 200 bytes into 64-byte buffers: its connection breaks.
        local_mr big = pool->allocate(200);
        bool failed = false;
        try {
            co_await ends[0].send(big.all());
        } catch (const std::system_error&) {
            failed = true;
        }
        CHECK(failed);
        ended_connection gone = co_await srq.ended(limit.token());
        INFO(gone.why);
        CHECK(gone.qp_num == servers[0].qp()->qp_num());
        CHECK(gone.why.find("longer than the queue's buffers (64 bytes)") != std::string::npos);

        // The others go on, through every buffer (8) many times over.
        for (int round = 0; round < 40; ++round) {
            for (int i = 1; i < 3; ++i)
                co_await send_records(ends[i], pool, static_cast<std::uint32_t>(i), 1);
            for (int i = 1; i < 3; ++i) {
                received_message m = co_await srq.next(limit.token());
                CHECK(m.size() == sizeof(record));
                CHECK(m.qp_num() != servers[0].qp()->qp_num());
            }
        }

        // Counted: the 80 messages that fit, and the one receive that failed
        // (rxe reports a message too long as loc_qp_op_err or loc_len_err).
        const shared_receive_metrics q = server_builder.metrics().shared_receive_queues.at(0);
        CHECK(q.counters[operation_kind::recv].completed == 80);
        CHECK(q.counters[operation_kind::recv].failed == 1);
        CHECK(q.counters.completions[IBV_WC_LOC_LEN_ERR] + q.counters.completions[IBV_WC_LOC_QP_OP_ERR] == 1);
        CHECK(q.counters.completions_reaped() == 81);
        CHECK(q.counters[operation_kind::recv].posted == 8 + 81);

        // A client that closes is reported with its peer.
        co_await ends[2].close();
        ended_connection closed = co_await srq.ended(limit.token());
        CHECK(closed.qp_num == servers[2].qp()->qp_num());
        CHECK(closed.peer == servers[2].peer());
    };
    sync_wait(run());
}

TEST_CASE("destroying a shared receive queue cancels what waits on it", "[srq]") {
    test::deadline limit(30s);
    builder b;
    auto srq = std::make_unique<shared_receive_queue>(b, 4, 64);
    auto listener_thread = b.event_listener();
    auto run = [&]() -> task<void> {
        bool cancelled = false;
        auto wait = [&]() -> task<void> {
            try {
                received_message m = co_await srq->next(limit.token());
            } catch (const operation_cancelled& e) {
                cancelled = std::string(e.what()).find("destroyed") != std::string::npos;
            }
        };
        auto drop = [&]() -> task<void> {
            co_await listener_thread->schedule();
            srq.reset();
        };
        co_await when_all(wait(), drop());
        CHECK(cancelled);
    };
    sync_wait(run());
    // Its counts stay in the listener's closed totals: its 4 receives
    // posted, none completed.
    metrics_snapshot after = b.metrics();
    CHECK(after.shared_receive_queues.empty());
    CHECK(after.closed[operation_kind::recv].posted == 4);
    // A builder whose queue is gone refuses new connections on it.
    shared_receive_queue kept(b, 4, 64);
    b.shared_receives(kept);
    kept = shared_receive_queue();
    CHECK_THROWS_WITH(b.listen(any_port()), Catch::Contains("destroyed"));
    builder server;
    listener l = server.listen(any_port());
    CHECK_THROWS_WITH(sync_wait(b.connect(l.address())), Catch::Contains("destroyed"));
}
