// Every builder setting takes effect on both transports (rdma_cm and the TCP
// endpoint exchange), each on the side that set it, or is refused by name.
// Effects are observed with ibv_query_qp on both ends of a real connection,
// and where a setting promises behaviour (remote access, RNR retries), by
// that behaviour.

#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using namespace std::chrono_literals;

namespace {

const char* name(endpoint_exchange how) { return how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"; }

struct queried {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
};

queried query(const connection& c) {
    queried q;
    int mask = IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER | IBV_QP_CAP;
    REQUIRE(ibv_query_qp(c.qp()->native_handle(), &q.attr, mask, &q.init) == 0);
    return q;
}

/// The index of the RoCE v2 GID holding the test address (IPv4-mapped), and
/// of one that does not fit an IPv4 connection (a RoCE v2 IPv6 GID), or -1.
struct gid_indices {
    int ipv4 = -1;
    int other_family = -1;
    int table = 0;
};

gid_indices find_gids(const device_context& device) {
    gid_indices out;
    ibv_port_attr port{};
    REQUIRE(ibv_query_port(device.native_handle(), 1, &port) == 0);
    out.table = port.gid_tbl_len;
    for (int i = 0; i < port.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(device.native_handle(), 1, static_cast<std::uint32_t>(i), &e, 0) != 0 ||
            e.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(e.gid.raw, prefix, 12) == 0)
            out.ipv4 = i;
        else if (out.other_family < 0)
            out.other_family = i;
    }
    return out;
}

task<std::uint64_t> fill_then_read(connection conn, std::shared_ptr<memory_pool> pool, remote_slice target) {
    local_mr buffer = pool->allocate(64);
    co_await conn.read(buffer.slice(0, 8), target.slice(0, 8));
    std::uint64_t value = 0;
    std::memcpy(&value, buffer.data(), 8);
    co_return value;
}

}  // namespace

TEST_CASE("every QP setting applies on the side that set it, on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder server_side;
    server_side.exchange(how)
        .timeout(12)
        .retry_count(6)
        .rnr_retry(4)
        .min_rnr_timer(10)
        .path_mtu(IBV_MTU_2048)
        .remote_access(access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic);
    builder client_side;
    client_side.exchange(how)
        .timeout(16)
        .retry_count(5)
        .rnr_retry(3)
        .min_rnr_timer(14)
        .path_mtu(IBV_MTU_1024)
        .remote_access(access_flags::remote_read)
        .send_queue_depth(32)
        .recv_queue_depth(16)
        .max_sge(2)
        .max_inline_data(32)
        .cq_size(2048)
        .polling(polling_mode::busy);
    listener l = server_side.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
    queried s = query(server);
    queried c = query(client);
    gid_indices gids = find_gids(*client_side.event_listener()->device());

    CHECK(static_cast<int>(c.attr.timeout) == 16);
    CHECK(static_cast<int>(s.attr.timeout) == 12);
    CHECK(static_cast<int>(c.attr.retry_cnt) == 5);
    CHECK(static_cast<int>(s.attr.retry_cnt) == 6);
    CHECK(static_cast<int>(c.attr.rnr_retry) == 3);
    CHECK(static_cast<int>(s.attr.rnr_retry) == 4);
    CHECK(static_cast<int>(c.attr.min_rnr_timer) == 14);
    CHECK(static_cast<int>(s.attr.min_rnr_timer) == 10);
    // Both sides use the smaller of the two MTU caps.
    CHECK(c.attr.path_mtu == IBV_MTU_1024);
    CHECK(s.attr.path_mtu == IBV_MTU_1024);
    CHECK(c.attr.qp_access_flags == IBV_ACCESS_REMOTE_READ);
    CHECK(s.attr.qp_access_flags == (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC));
    CHECK(static_cast<int>(c.attr.port_num) == 1);
    CHECK(static_cast<int>(c.attr.ah_attr.grh.sgid_index) == gids.ipv4);
    CHECK(static_cast<int>(s.attr.ah_attr.grh.sgid_index) == gids.ipv4);
    CHECK(c.init.cap.max_send_wr >= 32);
    CHECK(c.init.cap.max_recv_wr >= 16);
    CHECK(c.init.cap.max_send_sge >= 2);
    CHECK(c.init.cap.max_inline_data >= 32);
    CHECK(client.qp()->send_cq()->entries() >= 2048);
    CHECK(client_side.event_listener()->options().mode == polling_mode::busy);
    CHECK(server_side.event_listener()->options().mode == polling_mode::event);
    // What the queue pair was sized for is what connection checks against.
    auto pool = client_side.pool();
    local_mr m = pool->allocate(64);
    local_slice three[] = {m.slice(0, 8), m.slice(8, 8), m.slice(16, 8)};
    CHECK_THROWS_WITH(client.recv(three), Catch::Contains("between 1 and 2 slices"));
    sync_wait(client.close());
}

TEST_CASE("remote_access limits what the peer may do through the connection, on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder server_side;
    server_side.exchange(how).remote_access(access_flags::remote_read);
    builder client_side;
    client_side.exchange(how);
    listener l = server_side.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
    // The agent grants nothing the connection would not let through: a
    // request is narrowed to it, and one for nothing it allows is refused.
    remote_mr narrowed =
        sync_wait(client.request_remote_mr(64, 64, 10s, access_flags::remote_read | access_flags::remote_write));
    CHECK(narrowed.access() == access_flags::remote_read);
    CHECK_THROWS_WITH(sync_wait(client.request_remote_mr(64, 64, 10s, access_flags::remote_write)),
                      Catch::Contains("builder::remote_access"));
    // And the QP itself refuses a write, whatever the memory allows: the
    // server's pool memory is registered for every access; its address and
    // rkey go to the client by SEND, and the client builds the slice by hand.
    local_mr target = server_side.pool()->allocate(64);
    std::memset(target.data(), 0, 64);
    local_mr description = server_side.pool()->allocate(sizeof(remote_slice));
    remote_slice where = target.remote();
    std::memcpy(description.data(), &where, sizeof where);
    local_mr arrived = client_side.pool()->allocate(sizeof(remote_slice));
    sync_wait(when_all(client.recv(arrived.all()), server.send(description.all())));
    remote_slice by_hand;
    std::memcpy(&by_hand, arrived.data(), sizeof by_hand);
    REQUIRE(contains(by_hand.access, access_flags::remote_write));
    CHECK(sync_wait(fill_then_read(client, client_side.pool(), by_hand)) == 0);
    local_mr data = client_side.pool()->allocate(8);
    std::memset(data.data(), 0x5a, 8);
    CHECK_THROWS_MATCHES(sync_wait(client.write(data.all(), by_hand.slice(0, 8))), work_completion_error,
                         Catch::Predicate<work_completion_error>([](const work_completion_error& e) {
                             INFO(e.what());
                             return e.status() == IBV_WC_REM_ACCESS_ERR || e.status() == IBV_WC_REM_INV_REQ_ERR;
                         }));
    std::uint64_t untouched = 0;
    std::memcpy(&untouched, target.data(), 8);
    CHECK(untouched == 0);
}

TEST_CASE("rnr_retry applies to the side that set it, on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder server_side;
    // 0.01 ms between the client's retries, 7 (forever) on the server's own
    // QP: if the server's value reached the client, its send would never fail.
    server_side.exchange(how).min_rnr_timer(1).rnr_retry(7);
    builder client_side;
    client_side.exchange(how).rnr_retry(0);
    listener l = server_side.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
    local_mr data = client_side.pool()->allocate(8);
    auto start = std::chrono::steady_clock::now();
    // Nothing is posted on the server: receiver not ready, and no retries.
    CHECK_THROWS_MATCHES(sync_wait(client.send(data.all())), work_completion_error,
                         Catch::Predicate<work_completion_error>([](const work_completion_error& e) {
                             INFO(e.what());
                             return e.status() == IBV_WC_RNR_RETRY_EXC_ERR;
                         }));
    CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("gid_index is validated and honoured on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder good;
    good.exchange(how);
    listener l = good.listen(any_port());
    gid_indices gids = find_gids(*good.event_listener()->device());
    REQUIRE(gids.ipv4 >= 0);

    SECTION("an index past the table is refused at connect and at listen, listing the usable ones") {
        builder bad;
        bad.exchange(how).gid_index(77);
        // (Catch's combined matchers hold references: spelled out each time.)
        std::string setting = "builder::gid_index(77) over " + std::string(name(how));
        std::string usable = std::to_string(gids.ipv4) + " (::ffff:" + test::test_address() + ")";
        CHECK_THROWS_WITH(sync_wait(bad.connect(l.address())),
                          Catch::Contains(setting) && Catch::Contains("usable IPv4 GID indices") && Catch::Contains(usable));
        CHECK_THROWS_WITH(bad.listen(any_port()),
                          Catch::Contains(setting) && Catch::Contains("usable IPv4 GID indices") && Catch::Contains(usable));
        // The good listener was not disturbed: a good client still gets in.
        auto [s, c] = sync_wait(when_all(l.accept(), good.connect(l.address())));
        CHECK(c.peer() == l.address());
    }
    SECTION("an index of the other address family is refused, saying so") {
        if (gids.other_family < 0)
            FAIL("rxe0 has no RoCE v2 IPv6 GID to test with (its netdev has no IPv6 address)");
        builder bad;
        bad.exchange(how).gid_index(gids.other_family);
        CHECK_THROWS_WITH(sync_wait(bad.connect(l.address())), Catch::Contains("other address family"));
    }
    SECTION("a valid explicit index is the one the queue pair uses") {
        builder explicit_gid;
        explicit_gid.exchange(how).gid_index(gids.ipv4);
        auto [s, c] = sync_wait(when_all(l.accept(), explicit_gid.connect(l.address())));
        CHECK(static_cast<int>(query(c).attr.ah_attr.grh.sgid_index) == gids.ipv4);
    }
}

TEST_CASE("a port the device does not have is refused by name on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder good;
    good.exchange(how);
    listener l = good.listen(any_port());
    builder bad;
    bad.exchange(how).port(2);
    CHECK_THROWS_WITH(sync_wait(bad.connect(l.address())),
                      Catch::Contains("builder::port(2) over " + std::string(name(how))) && Catch::Contains("1 port"));
    CHECK_THROWS_WITH(bad.listen(any_port()), Catch::Contains("builder::port(2)"));
}

TEST_CASE("agent_limits apply to what a peer may take, on both transports", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder server_side;
    agent_limits limits;
    limits.max_region_size = 4096;
    server_side.exchange(how).agent_limits(limits);
    builder client_side;
    client_side.exchange(how);
    listener l = server_side.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
    CHECK_THROWS_WITH(sync_wait(client.request_remote_mr(8192)), Catch::Contains("4096"));
    CHECK(sync_wait(client.request_remote_mr(4096)).size() == 4096);
}

TEST_CASE("a client started before its server connects once the server listens", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    // Bind a port, note it, and close it: nothing listens there now.
    std::string address;
    {
        builder probe;
        probe.exchange(how);
        address = probe.listen(any_port()).address();
    }
    builder client_side;
    client_side.exchange(how).connect_timeout(20s);
    builder server_side;
    server_side.exchange(how);
    // The client starts first and is refused until the server listens, half
    // a second later. (The delay only creates the situation under test; the
    // outcome does not depend on it: a server that listened first would be
    // connected to as well.)
    connection c;
    std::thread early([&] { c = sync_wait(client_side.connect(address)); });
    std::this_thread::sleep_for(500ms);
    listener l = server_side.listen(address);
    connection s = sync_wait(l.accept());
    early.join();
    CHECK(c.peer() == address);
    CHECK_FALSE(s.is_broken());
}

TEST_CASE("a connect that stays refused fails when connect_timeout runs out, naming it", "[settings]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    builder b;
    b.exchange(how).connect_timeout(700ms);
    (void)b.event_listener();
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(sync_wait(b.connect(test::test_address() + ":19999")), std::system_error,
                         Catch::Predicate<std::system_error>([](const std::system_error& e) {
                             INFO(e.what());
                             return e.code() == std::errc::connection_refused &&
                                    std::string(e.what()).find("refused") != std::string::npos;
                         }));
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 500ms);
    CHECK(took < 5s);
}
