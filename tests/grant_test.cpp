// What a grant promises: its access is the intersection of what the call
// asks, what the region allows and what this side's limits allow, never
// more; operations outside it are refused before anything is posted; and a
// region a peer receives never shows a previous user's bytes. Both
// transports; also run under AddressSanitizer.

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

struct pair_of_peers {
    builder server_side;
    builder client_side;
    listener l;
    connection server;
    connection client;

    explicit pair_of_peers(endpoint_exchange how, access_flags server_access = access_flags::all) {
        server_side.exchange(how).remote_access(server_access);
        client_side.exchange(how);
        l = server_side.listen(test::test_address() + ":0");
        auto [s, c] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
        server = s;
        client = c;
    }
};

const char* name(endpoint_exchange how) { return how == endpoint_exchange::tcp ? "tcp" : "rdma_cm"; }

}  // namespace

TEST_CASE("a grant never carries more access than the region, the call and the limits allow", "[grant]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    pair_of_peers p(how);
    auto pd = p.server_side.pd();
    std::vector<std::byte> memory(4096);
    std::memcpy(memory.data(), "read me", 8);

    SECTION("a read-only region granted with the default (read and write) access is read-only") {
        local_mr region = register_local_mr(pd, memory.data(), memory.size(), access_flags::remote_read);
        sync_wait(p.server.send_local_mr(region.all(), 10s));
        remote_mr granted = sync_wait(p.client.receive_remote_mr());
        CHECK(granted.access() == access_flags::remote_read);
        local_mr buffer = p.client_side.pool()->allocate(64);
        sync_wait(p.client.read(buffer.slice(0, 8), granted.slice(0, 8)));
        CHECK(std::memcmp(buffer.data(), "read me", 8) == 0);
        // The write is refused here, naming the region, its rkey and access;
        // nothing reaches the wire and the connection stays up.
        CHECK_THROWS_MATCHES(p.client.write(buffer.slice(0, 8), granted.slice(0, 8)), std::invalid_argument,
                             Catch::Predicate<std::invalid_argument>([](const std::invalid_argument& e) {
                                 std::string what = e.what();
                                 INFO(what);
                                 return what.find("connection::write") != std::string::npos &&
                                        what.find("rkey=0x") != std::string::npos &&
                                        what.find("access=remote_read") != std::string::npos &&
                                        what.find("does not allow remote_write") != std::string::npos;
                             }));
        CHECK_THROWS_AS(p.client.fetch_add(granted.slice(0, 8), 1), std::invalid_argument);
        CHECK_FALSE(p.client.is_broken());
        sync_wait(p.client.read(buffer.slice(0, 8), granted.slice(0, 8)));
        CHECK(std::memcmp(buffer.data(), "read me", 8) == 0);
        CHECK(std::memcmp(memory.data(), "read me", 8) == 0);
    }
    SECTION("nothing left to grant is refused, naming each side of the intersection") {
        local_mr region = register_local_mr(pd, memory.data(), memory.size(), access_flags::remote_read);
        CHECK_THROWS_WITH(sync_wait(p.server.send_local_mr(region.all(), 10s, access_flags::remote_write)),
                          Catch::Contains("nothing left to grant") && Catch::Contains("the region allows remote_read"));
    }
    SECTION("a region requested for reading cannot be written") {
        remote_mr borrowed = sync_wait(p.client.request_remote_mr(64, 64, 10s, access_flags::remote_read));
        CHECK(borrowed.access() == access_flags::remote_read);
        local_mr buffer = p.client_side.pool()->allocate(64);
        CHECK_THROWS_AS(p.client.write(buffer.all(), borrowed.all()), std::invalid_argument);
        sync_wait(p.client.read(buffer.all(), borrowed.all()));
    }
}

TEST_CASE("a grant is narrowed to what the connection lets peers do", "[grant]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    // The server's QPs accept remote reads only: it must not grant writes.
    pair_of_peers p(how, access_flags::remote_read);
    local_mr region = p.server_side.pool()->allocate(64);
    sync_wait(p.server.send_local_mr(region.all(), 10s));
    remote_mr granted = sync_wait(p.client.receive_remote_mr());
    CHECK(granted.access() == access_flags::remote_read);
    // Requested memory follows the same rule: narrowed, not refused.
    remote_mr requested =
        sync_wait(p.client.request_remote_mr(64, 64, 10s, access_flags::remote_read | access_flags::remote_write));
    CHECK(requested.access() == access_flags::remote_read);
    // Nothing of what is asked allowed: refused, naming the setting.
    CHECK_THROWS_WITH(sync_wait(p.client.request_remote_mr(64, 64, 10s, access_flags::remote_write)),
                      Catch::Contains("is allowed") && Catch::Contains("builder::remote_access"));
}

TEST_CASE("requested memory never shows a previous user's bytes", "[grant]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    pair_of_peers p(how);
    local_mr buffer = p.client_side.pool()->allocate(4096);
    std::memset(buffer.data(), 0xa5, buffer.size());
    // Fill regions the server's pool hands out, give them back, ask again:
    // the pool reuses the memory, and every byte must read as zero.
    for (int round = 0; round < 3; ++round) {
        std::vector<remote_mr> held;
        for (int i = 0; i < 8; ++i) {
            held.push_back(sync_wait(p.client.request_remote_mr(4096)));
            local_mr seen = p.client_side.pool()->allocate(4096);
            std::memset(seen.data(), 0xff, seen.size());
            sync_wait(p.client.read(seen.all(), held.back().all()));
            std::vector<std::byte> zeros(4096);
            CHECK(std::memcmp(seen.data(), zeros.data(), zeros.size()) == 0);
            sync_wait(p.client.write(buffer.all(), held.back().all()));
        }
        held.clear();  // released: the server frees them for the next round
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (p.server_side.pool()->bytes_in_use() > 64 * 1024 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(5ms);
    }
}

TEST_CASE("a lease that ends is an ordinary outcome, even racing a hand-back", "[grant]") {
    auto how = GENERATE(endpoint_exchange::rdma_cm, endpoint_exchange::tcp);
    INFO("transport: " << name(how));
    pair_of_peers p(how);
    local_mr region = p.server_side.pool()->allocate(64);

    SECTION("the owner's word ends the grant; handing it back then says so") {
        sync_wait(p.server.send_local_mr(region.all(), 100ms));
        remote_mr granted = sync_wait(p.client.receive_remote_mr());
        auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!granted.expired() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(5ms);
        REQUIRE(granted.expired());
        CHECK_THROWS_MATCHES(sync_wait(p.client.send_remote_mr(std::move(granted))), std::system_error,
                             Catch::Predicate<std::system_error>([](const std::system_error& e) {
                                 INFO(e.what());
                                 return e.code() == std::errc::timed_out &&
                                        std::string(e.what()).find("lease expired") != std::string::npos;
                             }));
    }
    SECTION("hand-backs crossing the expiry on the wire leave the connection up") {
        for (int i = 0; i < 20; ++i) {
            sync_wait(p.server.send_local_mr(region.all(), 20ms));
            remote_mr granted = sync_wait(p.client.receive_remote_mr());
            std::this_thread::sleep_for(std::chrono::milliseconds(15 + i % 10));
            try {
                sync_wait(p.client.send_remote_mr(std::move(granted)));
            } catch (const std::system_error& e) {
                INFO(e.what());
                CHECK(e.code() == std::errc::timed_out);
            }
        }
    }
    // Both sides still work.
    CHECK_FALSE(p.client.is_broken());
    CHECK_FALSE(p.server.is_broken());
    remote_mr after = sync_wait(p.client.request_remote_mr(64));
    CHECK(after.size() == 64);
}
