// Connections from one builder share their device, PD, CQs and listener, and
// a connecting side can open more queue pairs to the same peer.

#include <cstring>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
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
