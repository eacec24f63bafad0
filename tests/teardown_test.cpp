// Teardown with work pending: connections, listeners and builders dropped
// (not closed) while lease timers, connect deadlines and accepts are still
// pending must free everything: every shared piece expires, and
// LeakSanitizer (this test runs only in the ASan build) finds nothing at
// exit. Timers still pending when the event listener stops are deleted on
// its thread, with whatever their callbacks hold.

#include <chrono>
#include <cstring>
#include <memory>
#include <stop_token>
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
using namespace std::chrono_literals;

namespace {

struct observed {
    std::weak_ptr<event_listener> listener;
    std::weak_ptr<memory_pool> pool;
};

/// Teardown finishes on the event listener's thread (what the last handle
/// posted runs there): wait for it, for at most 5 s.
template <class... Weak>
bool all_expire(const Weak&... weak) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!(weak.expired() && ...)) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

}  // namespace

TEST_CASE("dropping everything with leases and timers pending frees it all", "[teardown]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << (how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"));
    observed server_seen, client_seen;
    {
        builder server_side;
        server_side.exchange(how);
        builder client_side;
        client_side.exchange(how);
        listener l = server_side.listen(test::test_address() + ":0");
        auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
        // Lease timers on both agents: a region the client borrowed, and one
        // the server granted, each for a minute.
        remote_mr borrowed = sync_wait(client.request_remote_mr(4096, 64, 60s));
        local_mr lent = server_side.pool()->allocate(4096);
        sync_wait(server.send_local_mr(lent.all(), 60s));
        remote_mr granted = sync_wait(client.receive_remote_mr());
        CHECK(granted.size() == 4096);
        CHECK(borrowed.size() == 4096);
        server_seen = {server_side.event_listener(), server_side.pool()};
        client_seen = {client_side.event_listener(), client_side.pool()};
        // Dropped in whatever order the scope ends: no close(), leases live.
    }
    CHECK(all_expire(server_seen.listener, server_seen.pool));
    CHECK(all_expire(client_seen.listener, client_seen.pool));
}

TEST_CASE("a listener dropped with an accept cancelled and a client's deadline pending frees it all", "[teardown]") {
    std::weak_ptr<event_listener> seen;
    {
        builder b;
        b.connect_timeout(60s);
        listener l = b.listen(test::test_address() + ":0");
        std::stop_source stop;
        stop.request_stop();
        CHECK_THROWS_AS(sync_wait(l.accept(stop.get_token())), operation_cancelled);
        seen = b.event_listener();
    }
    CHECK(all_expire(seen));
}
