// Connections from one builder share their device, PD, CQs and listener, and
// a connecting side can open more queue pairs to the same peer.

#include <algorithm>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/device.hpp>
#include <cordma/listener.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;

TEST_CASE("new_connection opens another QP to the same peer on shared resources", "[builder][sharing]") {
    builder b;
    listener l = b.listen(test::test_address() + ":0");
    auto [server1, client1] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto [server2, client2] = sync_wait(when_all(l.accept(), client1.new_connection()));

    CHECK(client2.qp()->qp_num() != client1.qp()->qp_num());
    CHECK(client2.qp()->pd() == client1.qp()->pd());
    CHECK(client2.qp()->send_cq() == client1.qp()->send_cq());
    CHECK(client2.event_listener() == client1.event_listener());
    CHECK(server2.qp()->pd() == server1.qp()->pd());

    // Both carry traffic, independently.
    auto pool = b.pool();
    local_mr out = pool->allocate(64), in1 = pool->allocate(64), in2 = pool->allocate(64);
    std::memcpy(out.data(), "second queue pair", 18);
    auto [got2, got1, s2, s1] = sync_wait(when_all(server2.recv(in2.all()), server1.recv(in1.all()),
                                                   client2.send(out.slice(0, 18)), client1.send(out.slice(0, 5))));
    (void)s1;
    (void)s2;
    CHECK(got2.length == 18);
    CHECK(std::memcmp(in2.data(), "second queue pair", 18) == 0);
    CHECK(got1.length == 5);

    CHECK_THROWS_WITH(server1.new_connection(), Catch::Contains("only the side that connected"));
}

TEST_CASE("connections past what one completion queue holds get another one", "[builder][sharing]") {
    // Each QP takes room on the shared CQs for every work request it may
    // have outstanding. With the deepest send queue the device allows, one
    // CQ (at most max_cqe entries) holds few QPs: the builder must make
    // another for the next connection instead of failing to grow the first.
    builder b;
    b.agent(false);
    const auto& caps = b.pd()->device()->attributes();
    const auto depth = static_cast<std::uint32_t>(std::min(caps.max_qp_wr, caps.max_cqe / 2));
    b.send_queue_depth(depth);
    const int pairs = caps.max_cqe / static_cast<int>(depth) + 1;  // both ends' QPs share b's CQs
    listener l = b.listen(test::test_address() + ":0");
    std::vector<connection> ends;
    for (int i = 0; i < pairs; ++i) {
        auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
        ends.push_back(std::move(server));
        ends.push_back(std::move(client));
    }
    CHECK(ends.front().qp()->send_cq() != ends.back().qp()->send_cq());
    INFO("max_cqe " << caps.max_cqe << ", send queue depth " << depth << ", " << pairs << " connections");

    // The connection on the new CQ carries traffic, its completions found.
    auto pool = b.pool();
    local_mr out = pool->allocate(64), in = pool->allocate(64);
    std::memcpy(out.data(), "on another CQ", 14);
    connection& server = ends[ends.size() - 2];
    connection& client = ends.back();
    auto [got, sent] = sync_wait(when_all(server.recv(in.all()), client.send(out.slice(0, 14))));
    (void)sent;
    CHECK(got.length == 14);
    CHECK(std::memcmp(in.data(), "on another CQ", 14) == 0);
}
