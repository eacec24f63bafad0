// Plain RC connections (builder::agent(false)) between cordma peers, over
// both transports: data and private data each way, the agent's calls
// refused by name, new_connection, both ends disagreeing about the agent,
// the settings that cannot apply, and the MTU and settings on the QP.
// (cordma against programs that are not cordma: interop_test.cpp.)

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/deadline.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using namespace std::chrono_literals;

namespace {

builder plain_builder(endpoint_exchange how) {
    builder b;
    b.device(test::test_device_name()).exchange(how).agent(false);
    return b;
}

task<std::string> echo_once(connection conn, std::shared_ptr<memory_pool> pool, std::string text) {
    local_mr out = pool->allocate(4096);
    local_mr in = pool->allocate(4096);
    std::memcpy(out.data(), text.data(), text.size());
    auto [got, sent] = co_await when_all(conn.recv(in.all()), conn.send(out.slice(0, text.size())));
    (void)sent;
    co_return std::string(reinterpret_cast<char*>(in.data()), got.length);
}

std::string_view text_of(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

bool zeros(std::span<const std::byte> bytes) {
    for (std::byte b : bytes)
        if (b != std::byte{0})
            return false;
    return true;
}

}  // namespace

TEST_CASE("plain connections carry data and each side's private data", "[plain]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("exchange " << (how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"));
    builder b = plain_builder(how);
    b.private_data("from the listener");
    listener l = b.listen(any_port());
    b.private_data("from the client");  // later connections only
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    CHECK_FALSE(server.has_agent());
    CHECK_FALSE(client.has_agent());
    CHECK_THROWS_WITH(client.agent_metrics(), Catch::Contains("agent_metrics") && Catch::Contains("no agent"));

    auto pool = b.pool();
    auto [a, c] = sync_wait(when_all(echo_once(server, pool, "to the client"), echo_once(client, pool, "to the server")));
    CHECK(a == "to the server");
    CHECK(c == "to the client");

    auto heard_by_server = server.peer_private_data();
    auto heard_by_client = client.peer_private_data();
    if (how == endpoint_exchange::tcp) {
        // Exactly what the peer set.
        CHECK(text_of(heard_by_server) == "from the client");
        CHECK(text_of(heard_by_client) == "from the listener");
    } else {
        // What was sent, then the connection manager's zero padding up to
        // its message's size.
        REQUIRE(heard_by_server.size() == max_connect_private_data);
        REQUIRE(heard_by_client.size() == max_accept_private_data);
        CHECK(text_of(heard_by_server.first(15)) == "from the client");
        CHECK(zeros(heard_by_server.subspan(15)));
        CHECK(text_of(heard_by_client.first(17)) == "from the listener");
        CHECK(zeros(heard_by_client.subspan(17)));
    }
    sync_wait(client.close());
}

TEST_CASE("a plain connection sends no private data unless asked, and an agent connection shows none", "[plain]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    builder b = plain_builder(how);
    listener l = b.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    CHECK(zeros(server.peer_private_data()));
    CHECK(zeros(client.peer_private_data()));

    builder with_agent;
    with_agent.device(test::test_device_name()).exchange(how);
    listener la = with_agent.listen(any_port());
    auto [s2, c2] = sync_wait(when_all(la.accept(), with_agent.connect(la.address())));
    CHECK(s2.has_agent());
    CHECK(c2.peer_private_data().empty());
    CHECK(s2.peer_private_data().empty());
}

TEST_CASE("the agent's calls on a plain connection name the call, the peer and how to get an agent", "[plain]") {
    builder b = plain_builder(endpoint_exchange::rdma_cm);
    listener l = b.listen(any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto pool = b.pool();
    // The calls are lazy: each throws when awaited.
    auto refusal = [](auto call) -> std::string {
        try {
            (void)sync_wait(call());
        } catch (const std::logic_error& e) {
            return e.what();
        }
        return "no std::logic_error";
    };
    auto names = [](const std::string& message, const char* call, const connection& c) {
        INFO(message);
        CHECK_THAT(message, Catch::Contains(std::string("connection::") + call + " to " + c.peer()));
        CHECK_THAT(message, Catch::Contains("no agent"));
        CHECK_THAT(message, Catch::Contains("builder::agent(true)"));
    };
    local_mr region = pool->allocate(64);
    names(refusal([&] { return client.request_remote_mr(4096); }), "request_remote_mr", client);
    names(refusal([&] { return server.send_local_mr(region.all()); }), "send_local_mr", server);
    names(refusal([&] { return server.receive_remote_mr(); }), "receive_remote_mr", server);
    names(refusal([&] { return client.receive_local_mr(); }), "receive_local_mr", client);
    names(refusal([&] { return client.revoke_local_mr(region.all()); }), "revoke_local_mr", client);
}

TEST_CASE("new_connection on a plain connection opens another plain connection", "[plain]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    builder b = plain_builder(how);
    listener l = b.listen(any_port());
    b.private_data("again");
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto [server2, client2] = sync_wait(when_all(l.accept(), client.new_connection()));
    CHECK_FALSE(client2.has_agent());
    CHECK_FALSE(server2.has_agent());
    CHECK(text_of(server2.peer_private_data().first(5)) == "again");
    auto pool = b.pool();
    auto [a, c] = sync_wait(when_all(echo_once(server2, pool, "second"), echo_once(client2, pool, "QP")));
    CHECK(a == "QP");
    CHECK(c == "second");
    CHECK(client2.qp()->qp_num() != client.qp()->qp_num());
}

TEST_CASE("ends that disagree about the agent fail at once, saying which setting", "[plain]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    bool listener_has_agent = GENERATE(true, false);
    INFO("exchange " << (how == endpoint_exchange::tcp ? "tcp" : "rdma_cm") << ", listener with agent "
                     << listener_has_agent);
    builder server_side;
    server_side.device(test::test_device_name()).exchange(how).agent(listener_has_agent);
    listener l = server_side.listen(any_port());
    builder wrong;
    wrong.device(test::test_device_name()).exchange(how).agent(!listener_has_agent).connect_timeout(20s);
    builder right;
    right.device(test::test_device_name()).exchange(how).agent(listener_has_agent);

    // The listener refuses the wrong client and goes on: the right one is
    // the one it accepts.
    test::deadline limit(60s);
    auto started = std::chrono::steady_clock::now();
    auto [accepted, message] = sync_wait(when_all(l.accept(limit.token()), [&]() -> task<std::string> {
        std::string what = "the wrong client connected";
        try {
            (void)co_await wrong.connect(l.address());
        } catch (const std::system_error& e) {
            CHECK(e.code() == std::errc::protocol_not_supported);
            what = e.what();
        }
        (void)co_await right.connect(l.address());
        co_return what;
    }()));
    INFO(message);
    CHECK_THAT(message, Catch::Contains("builder::agent(false)") && Catch::Contains("agent on"));
    CHECK(std::chrono::steady_clock::now() - started < 15s);  // not the wrong client's connect_timeout
    CHECK(accepted.has_agent() == listener_has_agent);
}

TEST_CASE("settings that cannot apply without an agent, or with one, are refused by name", "[plain]") {
    std::string address = test::test_address() + ":1";
    using Catch::Contains;
    SECTION("private data with the agent on") {
        builder b;
        b.device(test::test_device_name()).private_data("hello");
        CHECK_THROWS_WITH((void)b.connect(address), Contains("builder::private_data (5 bytes) with the agent on") &&
                                                        Contains("builder::agent(false)"));
        CHECK_THROWS_WITH((void)b.listen(any_port()), Contains("builder::private_data") && Contains("at listen"));
    }
    SECTION("more private data than a connect request carries") {
        builder b = plain_builder(endpoint_exchange::tcp);
        b.private_data(std::string(57, 'x'));
        CHECK_THROWS_WITH((void)b.connect(address), Contains("builder::private_data (57 bytes), at connect") &&
                                                        Contains("at most 56"));
        CHECK_NOTHROW((void)b.listen(any_port()));  // an accept carries up to 196
        CHECK_THROWS_WITH(b.private_data(std::string(197, 'x')), Contains("builder::private_data(197 bytes)"));
    }
    SECTION("agent limits without an agent") {
        builder b = plain_builder(endpoint_exchange::rdma_cm);
        cordma::agent_limits limits;
        limits.max_regions = 3;
        b.agent_limits(limits);
        CHECK_THROWS_WITH((void)b.connect(address), Contains("builder::agent_limits with builder::agent(false)"));
        CHECK_THROWS_WITH((void)b.listen(any_port()), Contains("builder::agent_limits"));
    }
    SECTION("an agent deadline without an agent") {
        builder b = plain_builder(endpoint_exchange::tcp);
        b.agent_timeout(std::chrono::seconds(5));
        CHECK_THROWS_WITH((void)b.connect(address), Contains("builder::agent_timeout with builder::agent(false)"));
        CHECK_THROWS_WITH((void)b.listen(any_port()), Contains("builder::agent_timeout"));
    }
}

TEST_CASE("a plain connection's MTU is the path's, capped by builder::path_mtu, and other settings apply", "[plain]") {
    // Without a hello each side caps only its own QP, and an RC connection
    // needs the same MTU at both ends (the middle packets of a message are
    // exactly one MTU long; rxe fails a receive that gets others): a cap
    // must be set on both sides.
    builder server_side = plain_builder(endpoint_exchange::rdma_cm);
    server_side.path_mtu(IBV_MTU_1024);
    listener l = server_side.listen(any_port());
    builder b = plain_builder(endpoint_exchange::rdma_cm);
    // min_rnr_timer 31 (491 ms): the server's send below may beat this
    // side's receive, and its retries wait this long each (a short timer
    // made the echo fail under load).
    b.path_mtu(IBV_MTU_1024).retry_count(3).rnr_retry(2).timeout(12).min_rnr_timer(31).remote_access(
        access_flags::remote_read);
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto query = [](const connection& c) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        REQUIRE(ibv_query_qp(c.qp()->native_handle(), &attr,
                             IBV_QP_PATH_MTU | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT |
                                 IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS,
                             &init) == 0);
        return attr;
    };
    ibv_qp_attr mine = query(client);
    ibv_qp_attr theirs = query(server);
    // No cordma hello to agree on one: each side takes the path's MTU
    // (rdma_init_qp_attr), capped by its own builder::path_mtu.
    CHECK(mine.path_mtu == IBV_MTU_1024);
    CHECK(theirs.path_mtu == IBV_MTU_1024);
    CHECK(mine.retry_cnt == 3);
    CHECK(mine.rnr_retry == 2);
    CHECK(mine.timeout == 12);
    CHECK(mine.min_rnr_timer == 31);
    CHECK(mine.qp_access_flags == IBV_ACCESS_REMOTE_READ);
    // A message longer than the MTU goes out in several packets. (Each
    // side's buffers from its own builder's pool: two builders, two PDs.)
    std::string big(3000, 'm');
    auto [a, c] = sync_wait(when_all(echo_once(server, server_side.pool(), std::string(2500, 's')),
                                     echo_once(client, b.pool(), big)));
    CHECK(a == big);
    CHECK(c == std::string(2500, 's'));

    SECTION("without a cap, both sides take the path's MTU") {
        builder plain = plain_builder(endpoint_exchange::rdma_cm);
        listener l2 = plain.listen(any_port());
        auto [s2, c2] = sync_wait(when_all(l2.accept(), plain.connect(l2.address())));
        ibv_port_attr port{};
        REQUIRE(ibv_query_port(s2.qp()->native_handle()->context, 1, &port) == 0);
        CHECK(query(s2).path_mtu == port.active_mtu);
        CHECK(query(c2).path_mtu == port.active_mtu);
    }
}
