// One connection over two devices (builder::rails): both rails joined in
// one handshake over the TCP endpoint exchange, large writes and reads cut
// into a piece per rail and every byte checked, small ones on rail 0, and
// every way to set rails up wrongly refused by name, and a failed rail
// admitted again on new queue pairs. Needs two devices:
// tools/rxe-vm --rails 2 (rxe0 and rxe1, as tools/run-tests boots it), or
// CORDMA_TEST_RAILS="dev0 dev1" on a host with two.
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stop_token>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/rpc.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "engine/connection_state.hpp"
#include "engine/rail_stripes.hpp"
#include "engine/run_and_wait.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

/// The two devices to stripe over, rail 0 first (the test address's).
std::vector<std::string> rail_devices() {
    const char* names = std::getenv("CORDMA_TEST_RAILS");
    if (names == nullptr)
        names = std::getenv("RXE_VM_RAIL_DEVICES");
    std::istringstream in(names != nullptr ? names : "");
    std::vector<std::string> out;
    for (std::string name; in >> name && out.size() < 2;)
        out.push_back(name);
    if (out.size() < 2)
        FAIL("rails_test needs two RDMA devices: run it under tools/rxe-vm --rails 2 (tools/run-tests does), or "
             "set CORDMA_TEST_RAILS=\"dev0 dev1\" (rail 0's device holds the test address)");
    return out;
}

builder rails_builder() {
    builder b;
    b.exchange(endpoint_exchange::tcp).rails(rail_devices());
    return b;
}

void fill(local_mr& mr, unsigned seed) {
    for (std::size_t i = 0; i < mr.size(); ++i)
        mr.data()[i] = static_cast<std::byte>((i * 131 + (i >> 12) + seed) & 0xff);
}

/// The first offset where `a` and `b` differ, or -1.
long long first_difference(const local_mr& a, const local_mr& b) {
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a.data()[i] != b.data()[i])
            return static_cast<long long>(i);
    return -1;
}

}  // namespace

TEST_CASE("builder::rails and stripe_threshold refuse bad arguments by name", "[rails]") {
    builder b;
    CHECK_THROWS_WITH(b.rails({"rxe0"}), Catch::Contains("builder::rails({\"rxe0\"})") &&
                                             Catch::Contains("give 2 to 4 device names"));
    CHECK_THROWS_WITH(b.rails({"rxe0", "rxe1", "rxe2", "rxe3", "rxe4"}), Catch::Contains("give 2 to 4"));
    CHECK_THROWS_WITH(b.rails({"rxe0", "rxe0"}), Catch::Contains("rxe0 is named twice"));
    CHECK_THROWS_WITH(b.rails({"rxe0", ""}), Catch::Contains("rail 1 names no device"));
    CHECK_THROWS_WITH(b.stripe_threshold(100), Catch::Contains("builder::stripe_threshold(100)") &&
                                                   Catch::Contains("at least 4096"));
    std::byte memory[64];
    CHECK_THROWS_WITH(register_local_mr(std::vector<std::shared_ptr<protection_domain>>{}, memory, sizeof memory,
                                        access_flags::local_write),
                      Catch::Contains("register_local_mr(0 protection domains)") && Catch::Contains("give 1 to 4"));
}

TEST_CASE("rails are refused by name where they cannot apply", "[rails]") {
    std::vector<std::string> devices = rail_devices();
    SECTION("over rdma_cm") {
        builder b;
        b.rails(devices);
        CHECK_THROWS_WITH(b.listen(test::any_port()), Catch::Contains("builder::rails (2 devices) over rdma_cm") &&
                                                          Catch::Contains("endpoint_exchange::tcp"));
        CHECK_THROWS_WITH(sync_wait(b.connect(test::test_address() + ":7471")),
                          Catch::Contains("over rdma_cm, at connect"));
    }
    SECTION("with another builder::device") {
        builder b;
        b.exchange(endpoint_exchange::tcp).rails(devices).device(devices[1]);
        CHECK_THROWS_WITH(b.listen(test::any_port()), Catch::Contains("builder::device(\"" + devices[1] +
                                                                      "\") with builder::rails"));
    }
    SECTION("a device that is not there, named as its rail") {
        builder b;
        b.exchange(endpoint_exchange::tcp).rails({devices[0], "cordma_no_such_device"});
        CHECK_THROWS_WITH(b.listen(test::any_port()), Catch::Contains("builder::rails: rail 1") &&
                                                          Catch::Contains("cordma_no_such_device"));
    }
    SECTION("connection_settings::rails set directly, checked as builder::rails checks it") {
        connection_settings settings;
        settings.exchange = endpoint_exchange::tcp;
        settings.rails = {devices[0], devices[0]};
        builder b(settings);
        CHECK_THROWS_WITH(b.listen(test::any_port()), Catch::Contains("connection_settings::rails") &&
                                                          Catch::Contains("is named twice"));
    }
    SECTION("a peer with another number of rails") {
        builder server = rails_builder();
        builder client;
        client.exchange(endpoint_exchange::tcp).device(devices[0]);
        listener l = server.listen(test::any_port());
        CHECK_THROWS_WITH(sync_wait(client.connect(l.address())),
                          Catch::Contains("the peer has 2 rail(s) and this side 1") &&
                              Catch::Contains("give both sides as many rails"));
    }
}

TEST_CASE("a connection over two rails stripes large writes and reads, every byte right", "[rails]") {
    builder server_side = rails_builder();
    builder client_side = rails_builder();
    client_side.stripe_threshold(64 << 10);
    listener l = server_side.listen(test::any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));

    std::vector<rail_info> before = client.rails();
    REQUIRE(before.size() == 2);
    CHECK(before[0].device == rail_devices()[0]);
    CHECK(before[1].device == rail_devices()[1]);
    CHECK(before[0].up);
    CHECK(before[1].up);
    REQUIRE(server.rails().size() == 2);

    constexpr std::size_t size = 16 << 20;
    local_mr target = server_side.pool()->allocate(size);
    std::memset(target.data(), 0, size);
    // The server's region, with its key on each rail, travels as bytes.
    remote_slice where = target.remote();
    CHECK(where.rails == 2);
    CHECK(where.rail_rkeys[0] != 0);

    local_mr source = client_side.pool()->allocate(size);
    fill(source, 7);
    local_mr back = client_side.pool()->allocate(size);
    std::memset(back.data(), 0, size);

    // Large: striped. 16 writes of 1 MiB and one of the whole region, then
    // the whole region read back.
    sync_wait([&]() -> task<void> {
        for (std::size_t off = 0; off < size; off += 1 << 20)
            co_await client.write(source.slice(off, 1 << 20), where.slice(off, 1 << 20));
        co_await client.write(source, where);
        co_await client.read(back, where);
    }());
    CHECK(first_difference(target, source) == -1);
    CHECK(first_difference(back, source) == -1);

    std::vector<rail_info> after = client.rails();
    REQUIRE(after.size() == 2);
    // Each striped operation put one piece on each rail.
    auto writes = [](const rail_info& r) { return r.counters[operation_kind::write].completed; };
    auto reads = [](const rail_info& r) { return r.counters[operation_kind::read].completed; };
    CHECK(writes(after[1]) - writes(before[1]) == 17);
    CHECK(writes(after[0]) - writes(before[0]) == 17);
    CHECK(reads(after[1]) - reads(before[1]) == 1);
    CHECK(reads(after[0]) - reads(before[0]) == 1);
    CHECK(after[1].counters[operation_kind::write].bytes + after[0].counters[operation_kind::write].bytes -
              before[1].counters[operation_kind::write].bytes - before[0].counters[operation_kind::write].bytes ==
          2 * size);

    // Small: rail 0 only.
    fill(source, 9);
    sync_wait([&]() -> task<void> { co_await client.write(source.slice(0, 4096), where.slice(0, 4096)); }());
    std::vector<rail_info> small = client.rails();
    CHECK(writes(small[1]) == writes(after[1]));
    CHECK(writes(small[0]) == writes(after[0]) + 1);
    CHECK(std::memcmp(target.data(), source.data(), 4096) == 0);

    // A region the peer made by hand (one key): rail 0 only, whole.
    remote_slice by_hand{where.address, where.length, where.rkey, where.access};
    sync_wait([&]() -> task<void> { co_await client.write(source, by_hand); }());
    CHECK(first_difference(target, source) == -1);
    CHECK(writes(client.rails()[1]) == writes(after[1]));

    // Messages still flow on rail 0.
    local_mr hello = client_side.pool()->allocate(16);
    std::memcpy(hello.data(), "over rail 0", 12);
    local_mr got = server_side.pool()->allocate(16);
    sync_wait(when_all(server.recv(got), client.send(hello.slice(0, 12))));
    CHECK(std::memcmp(got.data(), "over rail 0", 12) == 0);

    // Closing the connection closes both rails.
    client.shut_down();
    std::vector<rail_info> closed = client.rails();
    CHECK_FALSE(closed[0].up);
    CHECK_FALSE(closed[1].up);
}

TEST_CASE("a striped write cancelled while its pieces run or wait gives them back", "[rails]") {
    builder server_side = rails_builder();
    builder client_side = rails_builder();
    // One request in flight per rail, and a send that waits (receiver not
    // ready, retried without end) until the server posts its receive: the
    // write behind it has one piece posted on rail 1 and one waiting for
    // room on rail 0, and can only end by being cancelled.
    client_side.stripe_threshold(64 << 10).send_queue_depth(1).rnr_retry(7);
    server_side.min_rnr_timer(12);
    listener l = server_side.listen(test::any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));
    constexpr std::size_t size = 4 << 20;
    local_mr target = server_side.pool()->allocate(size);
    local_mr source = client_side.pool()->allocate(size);
    fill(source, 3);
    remote_slice where = target.remote();
    local_mr note = client_side.pool()->allocate(8);
    local_mr got = server_side.pool()->allocate(8);
    // Bytes are counted as requests are posted, so pieces still completing
    // after their write was cancelled add nothing later.
    auto rail1_bytes = [&] { return client.rails()[1].counters[operation_kind::write].bytes; };

    // 40 rounds: more than the 32 pieces the connection has, so a piece
    // kept by a cancelled write would leave later writes none to stripe with.
    constexpr int rounds = 40;
    int cancelled = 0;
    std::uint64_t at_start = rail1_bytes();
    for (int round = 0; round < rounds; ++round) {
        std::stop_source stop;
        sync_wait([&]() -> task<void> {
            // On the event listener thread, so the write has started before
            // the stop is requested.
            co_await client.event_listener()->schedule();
            co_await when_all(client.send(note),
                              [&]() -> task<void> {
                                  try {
                                      co_await client.write(source, where, stop.get_token());
                                  } catch (const operation_cancelled&) {
                                      ++cancelled;
                                  }
                                  co_await server.recv(got);  // lets the send through
                              }(),
                              [&]() -> task<void> {
                                  stop.request_stop();
                                  co_return;
                              }());
        }());
    }
    CHECK(cancelled == rounds);
    // Each cancelled write's rail 1 piece was posted.
    CHECK(rail1_bytes() - at_start == rounds * size / 2);
    std::uint64_t before = rail1_bytes();
    sync_wait([&]() -> task<void> {
        for (int i = 0; i < 5; ++i)
            co_await client.write(source, where);
    }());
    // Every piece of a cancelled write came back: the writes still stripe,
    // half of each on rail 1.
    CHECK(rail1_bytes() - before == 5 * size / 2);
    CHECK(first_difference(target, source) == -1);
    CHECK_FALSE(client.is_broken());
}

namespace {

/// Rail `rail` of `conn`, as its stripes hold it (white box: its generation).
std::uint32_t generation_of(const connection& conn, std::uint8_t rail) {
    std::uint32_t out = 0;
    const auto& state = detail::connection_access::state(conn);
    detail::run_and_wait(*state->event_listener(), [&] { out = state->stripes()->generation(rail); });
    return out;
}

/// Polls (this thread; the event listener's runs the rails) until `done`,
/// failing the test after `limit`.
template <class F>
void wait_until(F&& done, std::chrono::seconds limit, const char* what) {
    auto t0 = std::chrono::steady_clock::now();
    while (!done()) {
        if (std::chrono::steady_clock::now() - t0 > limit)
            FAIL("not within " << limit.count() << " s: " << what);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace

TEST_CASE("a failed rail is admitted again on new queue pairs and carries its share again", "[rails]") {
    builder server_side = rails_builder();
    builder client_side = rails_builder();
    client_side.stripe_threshold(64 << 10);
    listener l = server_side.listen(test::any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));

    constexpr std::size_t size = 1 << 20;  // striped from 64 KiB; small, as the sanitizers check every byte
    local_mr target = server_side.pool()->allocate(size);
    std::memset(target.data(), 0, size);
    remote_slice where = target.remote();
    local_mr source = client_side.pool()->allocate(size);
    local_mr back = client_side.pool()->allocate(size);
    auto writes = [](const connection& c) { return c.rails()[1].counters[operation_kind::write].completed; };
    const std::uint32_t client_qp = client.rails()[1].qp_num;
    const std::uint32_t server_qp = server.rails()[1].qp_num;

    // The rail fails on one side (as its link going down would show there);
    // the other hears it over the exchange socket and takes its end down.
    bool on_client = GENERATE(true, false);
    INFO((on_client ? "rail 1 failed on the client's side" : "rail 1 failed on the listener's side"));
    fill(source, 3);
    connection& failing = on_client ? client : server;
    const auto& state = detail::connection_access::state(failing);
    bool shut = false;
    detail::run_and_wait(*state->event_listener(),
                         [&] { shut = state->stripes()->shut_down_rail(1, 0, "rail 1 taken down by the test"); });
    REQUIRE(shut);
    // No generation but the current one takes a rail down.
    detail::run_and_wait(*state->event_listener(), [&] { shut = state->stripes()->shut_down_rail(1, 7, "stale"); });
    CHECK_FALSE(shut);
    CHECK_FALSE(failing.rails()[1].up);
    CHECK(failing.rails()[1].why_down == "rail 1 taken down by the test");
    CHECK(failing.rails()[0].up);

    // Meanwhile a large write goes whole on rail 0 (or, if the rail is
    // back already, striped), every byte right.
    std::uint64_t rail1_before = writes(client);
    sync_wait([&]() -> task<void> { co_await client.write(source, where); }());
    CHECK(first_difference(target, source) == -1);
    if (on_client && client.rails()[1].qp_num == client_qp)  // the failed QP: no piece went on it
        CHECK(writes(client) == rail1_before);

    // Back after the hold-down (1 s) and a probe, on new QPs, on both sides.
    wait_until([&] { return client.rails()[1].up && client.rails()[1].qp_num != client_qp; }, std::chrono::seconds(20),
               "the client's rail 1 back on a new queue pair");
    wait_until([&] { return server.rails()[1].up && server.rails()[1].qp_num != server_qp; }, std::chrono::seconds(20),
               "the listener's rail 1 back on a new queue pair");
    CHECK(generation_of(client, 1) == 1);
    CHECK(generation_of(server, 1) == 1);
    CHECK(client.rails()[1].why_down.empty());

    // It carries its share again: one piece of each striped operation.
    fill(source, 5);
    std::memset(back.data(), 0, size);
    rail_info back_up = client.rails()[1];
    sync_wait([&]() -> task<void> {
        co_await client.write(source, where);
        co_await client.read(back, where);
    }());
    CHECK(first_difference(target, source) == -1);
    CHECK(first_difference(back, source) == -1);
    rail_info now = client.rails()[1];
    CHECK(now.qp_num == back_up.qp_num);
    CHECK(now.counters[operation_kind::write].completed - back_up.counters[operation_kind::write].completed == 1);
    CHECK(now.counters[operation_kind::read].completed - back_up.counters[operation_kind::read].completed == 1);
    CHECK(now.counters[operation_kind::write].bytes - back_up.counters[operation_kind::write].bytes == size / 2);

    client.shut_down();
    CHECK_FALSE(client.rails()[1].up);
}

TEST_CASE("a stream over two rails reads a large write's frames striped, every byte right", "[rails]") {
    builder server_side = rails_builder();
    server_side.stripe_threshold(64 << 10);
    builder client_side = rails_builder();
    stream_listener l = stream::serve(server_side, test::any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), stream::connect(client_side, l.address())));

    // Written from the client's pool (its key on both rails travels in the
    // link's rts frames); read in parts under register_size (1 MiB), which
    // land in the server's pool: both sides' memory is on both rails.
    constexpr std::size_t size = 4 << 20;
    constexpr std::size_t part = 512 << 10;
    local_mr source = client_side.pool()->allocate(size);
    fill(source, 11);
    std::vector<std::byte> got(size);
    const rail_info before = server.connection().rails()[1];
    sync_wait(when_all(client.write(source.all()), [&]() -> task<void> {
        for (std::size_t off = 0; off < size; off += part)
            co_await server.read_exactly(std::span(got).subspan(off, part));
    }()));
    CHECK(std::memcmp(got.data(), source.data(), size) == 0);
    const rail_info after = server.connection().rails()[1];
    CHECK(after.up);
    std::uint64_t reads = after.counters[operation_kind::read].completed - before.counters[operation_kind::read].completed;
    std::uint64_t bytes = after.counters[operation_kind::read].bytes - before.counters[operation_kind::read].bytes;
    INFO("rail 1 read " << reads << " pieces, " << bytes << " bytes");
    CHECK(reads >= size / part / 2);
    CHECK(bytes >= size / 4);
    CHECK(bytes < size);

    // From and into plain memory: the writer registers it for the call and
    // the reader's large reads (from register_size, 1 MiB) through the
    // builder's cache, both on every rail now.
    std::vector<std::byte> plain(size);
    for (std::size_t i = 0; i < size; ++i)
        plain[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
    std::vector<std::byte> landed(size);
    constexpr std::size_t big_part = 2 << 20;
    sync_wait(when_all(client.write(std::span<const std::byte>(plain)), [&]() -> task<void> {
        for (std::size_t off = 0; off < size; off += big_part)
            co_await server.read_exactly(std::span(landed).subspan(off, big_part));
    }()));
    CHECK(landed == plain);
    const rail_info last = server.connection().rails()[1];
    std::uint64_t plain_bytes = last.counters[operation_kind::read].bytes - after.counters[operation_kind::read].bytes;
    INFO("rail 1 read " << plain_bytes << " bytes of plain memory");
    CHECK(plain_bytes >= size / 4);
    CHECK(plain_bytes < size);
}

TEST_CASE("an rpc call over two rails reads its large request and response striped, every byte right", "[rails]") {
    // The server's connections receive through one SRQ on rail 0; its
    // rails carry the rendezvous reads.
    builder server_side = rails_builder();
    server_side.stripe_threshold(64 << 10);
    rpc::server server(server_side);
    server.handle(1, "reverse", [](rpc::request r) -> task<std::vector<std::byte>> {
        std::vector<std::byte> out(r.bytes().rbegin(), r.bytes().rend());
        co_return out;
    });
    listener l = server_side.listen(test::any_port());
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(l, stop.get_token())); });

    builder client_side = rails_builder();
    client_side.stripe_threshold(64 << 10);
    {
        rpc::client c = sync_wait(rpc::client::connect(client_side, l.address()));
        constexpr std::size_t size = 1 << 20;  // far over the eager size: both ways by rendezvous
        std::vector<std::byte> request(size);
        for (std::size_t i = 0; i < size; ++i)
            request[i] = static_cast<std::byte>((i * 13 + (i >> 9)) & 0xff);
        const rail_info before = c.connection().rails()[1];
        std::vector<std::byte> answer = c.call_sync(1, request);
        REQUIRE(answer.size() == size);
        CHECK(std::equal(answer.begin(), answer.end(), request.rbegin()));
        // The client read the response: half of it on rail 1.
        const rail_info after = c.connection().rails()[1];
        CHECK(after.up);
        CHECK(after.counters[operation_kind::read].completed - before.counters[operation_kind::read].completed == 1);
        CHECK(after.counters[operation_kind::read].bytes - before.counters[operation_kind::read].bytes == size / 2);
        // The server read the request (before its handler ran): half of it
        // on its rail 1, in its listener's metrics (role "rail").
        std::uint64_t server_rail_reads = 0;
        for (const auto& conn : server_side.event_listener()->metrics().connections)
            if (conn.role == "rail")
                server_rail_reads += conn.counters[operation_kind::read].bytes;
        CHECK(server_rail_reads == size / 2);
    }
    stop.request_stop();
    serving.join();
}

TEST_CASE("the agent's grants carry their key on every rail, and writes to them stripe", "[rails]") {
    builder server_side = rails_builder();
    builder client_side = rails_builder();
    client_side.stripe_threshold(64 << 10);
    listener l = server_side.listen(test::any_port());
    auto [server, client] = sync_wait(when_all(l.accept(), client_side.connect(l.address())));

    constexpr std::size_t size = 1 << 20;
    remote_mr granted = sync_wait(client.request_remote_mr(size));
    CHECK(granted.all().rails == 2);
    CHECK(granted.all().rail_rkeys[0] != 0);
    local_mr source = client_side.pool()->allocate(size);
    fill(source, 21);
    local_mr back = client_side.pool()->allocate(size);
    std::memset(back.data(), 0, size);
    const rail_info before = client.rails()[1];
    sync_wait([&]() -> task<void> {
        co_await client.write(source, granted);
        co_await client.read(back, granted);
    }());
    CHECK(first_difference(back, source) == -1);
    const rail_info after = client.rails()[1];
    CHECK(after.counters[operation_kind::write].completed - before.counters[operation_kind::write].completed == 1);
    CHECK(after.counters[operation_kind::write].bytes - before.counters[operation_kind::write].bytes == size / 2);
    CHECK(after.counters[operation_kind::read].completed - before.counters[operation_kind::read].completed == 1);
}
