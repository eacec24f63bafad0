// Everything given back: for every connection style and module, after
// everything is closed, this process's RDMA resources as the kernel counts
// them (`rdma resource show` qp, cq, mr, pd, cm_id with our pid) and its
// open file descriptors are what they were before. Each style runs once to
// warm up (librdmacm and libibverbs keep a device context per process from
// first use, as they should), then again between the two counts, with
// real bytes moved and checked.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/group.hpp>
#include <cordma/listener.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/rpc.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "support/process_resources.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

std::atomic<int> next_port{7900};

std::string fresh_address() { return test::test_address() + ":" + std::to_string(next_port++); }

builder device_builder() {
    builder b;
    b.device(test::test_device_name());
    return b;
}

/// The count while a style's connections are open (note_held()).
test::process_resources held;
void note_held() { held = test::current_resources(); }

/// The kernel's count, taken again every 20 ms until `settled` holds or 5 s
/// have passed. The last handle of a connection or listener can drop on the
/// event listener's own thread (a coroutine finishing there), which then
/// tears down on its own a moment later, and a server's side of a connection
/// goes when the client's disconnect reaches it.
test::process_resources count_when(const std::function<bool(const test::process_resources&)>& settled,
                                   double* waited_ms) {
    auto from = std::chrono::steady_clock::now();
    auto now = test::current_resources();
    while (!settled(now) && std::chrono::steady_clock::now() - from < std::chrono::seconds(5)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the kernel's count, bounded
        now = test::current_resources();
    }
    *waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from).count();
    return now;
}

/// Runs `body` once to warm up, then again between two counts that must
/// match. The body calls note_held() while everything is open: that count
/// must be higher, or the comparison would prove nothing. "Before" is taken
/// once the warm-up's queue pairs and rdma_cm ids are gone (they have no
/// cache to stay in), so that its teardown is not counted in it.
void gives_everything_back(const char* style, const std::function<void()>& body) {
    auto initial = test::current_resources();
    body();
    double before_ms = 0, after_ms = 0;
    auto before = count_when(
        [&](const test::process_resources& r) { return r.qp == initial.qp && r.cm_id == initial.cm_id; }, &before_ms);
    held = {};
    body();
    auto after = count_when([&](const test::process_resources& r) { return r == before; }, &after_ms);
    INFO("before settled " << before_ms << " ms after the warm-up, after " << after_ms << " ms after the body");
    INFO(style << ": before " << before.to_string() << "; while open " << held.to_string() << "; after "
               << after.to_string());
    CHECK(held.qp > before.qp);
    CHECK(held.fds >= before.fds);
    CHECK(after == before);
}

/// Writes 4 KiB of `seed` through `from` into `to`'s memory and reads it back.
task<void> write_and_read(connection from, local_mr* to_region, std::shared_ptr<memory_pool> pool, int seed) {
    local_mr mine = pool->allocate(4096);
    local_mr back = pool->allocate(4096);
    std::memset(mine.data(), seed, 4096);
    co_await from.write(mine.all(), to_region->remote());
    co_await from.read(back.all(), to_region->remote());
    if (std::memcmp(back.data(), mine.data(), 4096) != 0 || to_region->data()[4095] != std::byte(seed))
        throw std::runtime_error("the bytes read back are not the ones written");
}

task<std::pair<connection, connection>> pair_up(builder& b, listener& l) {
    auto [server, client] = co_await when_all(l.accept(), b.connect(l.address()));
    co_return std::pair{std::move(client), std::move(server)};
}

void connection_round(bool agent, endpoint_exchange exchange) {
    builder b = device_builder();
    b.agent(agent).exchange(exchange);
    listener l = b.listen(fresh_address());
    auto [client, server] = sync_wait(pair_up(b, l));
    auto pool = b.pool();
    local_mr target = pool->allocate_zeroed(4096);
    sync_wait(write_and_read(client, &target, pool, 7));
    note_held();
    if (agent) {
        remote_mr granted = sync_wait(client.request_remote_mr(8192));
        REQUIRE(granted.size() >= 8192);
        auto [accepted, opened] = sync_wait(when_all(l.accept(), client.new_connection()));
        sync_wait(write_and_read(opened, &target, pool, 9));
        sync_wait(opened.close());
        sync_wait(accepted.close());
    }
    sync_wait(client.close());
    sync_wait(server.close());
}

}  // namespace

TEST_CASE("rdma_cm connections with the agent give everything back", "[resources]") {
    gives_everything_back("rdma_cm, agent", [] { connection_round(true, endpoint_exchange::rdma_cm); });
}

TEST_CASE("plain rdma_cm connections give everything back", "[resources]") {
    gives_everything_back("rdma_cm, plain", [] { connection_round(false, endpoint_exchange::rdma_cm); });
}

TEST_CASE("TCP-exchange connections give everything back", "[resources]") {
    gives_everything_back("tcp, agent", [] { connection_round(true, endpoint_exchange::tcp); });
    gives_everything_back("tcp, plain", [] { connection_round(false, endpoint_exchange::tcp); });
}

TEST_CASE("loopback pairs give everything back", "[resources]") {
    gives_everything_back("connect_loopback", [] {
        auto listener = event_listener::start(test::open_test_device());
        auto [a, b] = connect_loopback(listener);
        auto pool = memory_pool::create(a.qp()->pd());
        local_mr target = pool->allocate_zeroed(4096);
        sync_wait(write_and_read(a, &target, pool, 3));
        note_held();
        sync_wait(a.close());
        sync_wait(b.close());
    });
}

TEST_CASE("connections through a shared receive queue give everything back", "[resources]") {
    gives_everything_back("shared receive queue", [] {
        builder b = device_builder();
        shared_receive_queue srq(b, 16, 256);
        b.shared_receives(srq);
        listener l = b.listen(fresh_address());
        auto [client, server] = sync_wait(pair_up(b, l));
        auto pool = b.pool();
        local_mr out = pool->allocate(64);
        std::memset(out.data(), 5, 64);
        sync_wait(client.send(out.all()));
        received_message m = sync_wait(srq.next(std::chrono::seconds(20)));
        REQUIRE(m.size() == 64);
        CHECK(m.data()[63] == std::byte(5));
        m.release();
        note_held();
        sync_wait(client.close());
        sync_wait(server.close());
    });
}

TEST_CASE("a connection whose peer process is killed gives everything back", "[resources]") {
    const char* peer = std::getenv("CORDMA_TEST_PEER");
    REQUIRE(peer != nullptr);
    gives_everything_back("peer killed", [peer] {
        builder b = device_builder();
        std::string address = fresh_address();
        listener l = b.listen(address);
        pid_t child = ::fork();
        if (child == 0) {
            ::execl(peer, peer, "sleep", address.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        REQUIRE(child > 0);
        connection server = sync_wait(l.accept());
        note_held();
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        // The peer's kernel closes its side: our recv must fail, not hang.
        auto pool = b.pool();
        local_mr buffer = pool->allocate(64);
        bool failed = false;
        try {
            sync_wait(server.recv(buffer.all()));
        } catch (const std::system_error&) {
            failed = true;
        }
        CHECK(failed);
        sync_wait(server.close());
    });
}

TEST_CASE("streams give everything back", "[resources]") {
    gives_everything_back("stream", [] {
        builder b = device_builder();
        stream_listener l = stream::serve(b, fresh_address());
        auto [server, client] = sync_wait(when_all(l.accept(), stream::connect(b, l.address())));
        std::vector<std::byte> out(100000, std::byte{0x3c}), in(out.size());
        sync_wait(when_all(client.write(out), server.read_exactly(in)));
        CHECK(in == out);
        note_held();
        sync_wait(client.close());
        sync_wait(server.close());
    });
}

namespace {

/// An rpc echo server on a thread of its own and one client making a
/// checked call of 3000 bytes of `fill`; then the client goes, closed or
/// (`close_client` false) dropped, and the server stops.
void rpc_round(std::byte fill, bool close_client) {
    builder b = device_builder();
    std::string address = fresh_address();
    rpc::server server(b);
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(b.listen(address), stop.get_token())); });
    {
        rpc::client c = sync_wait(rpc::client::connect(b, address));
        std::vector<std::byte> request(3000, fill);
        CHECK(sync_wait(c.call(1, request)) == request);
        note_held();
        if (close_client)
            sync_wait(c.close());
    }  // else dropped: closed in the background
    stop.request_stop();
    serving.join();
}

}  // namespace

TEST_CASE("rpc servers and clients give everything back", "[resources]") {
    gives_everything_back("rpc", [] { rpc_round(std::byte{0x11}, true); });
}

TEST_CASE("groups give everything back", "[resources]") {
    gives_everything_back("group of 2", [] {
        std::vector<std::string> hosts{fresh_address(), fresh_address()};
        std::vector<std::string> failures(2);
        auto rank = [&](int r) {
            try {
                builder b = device_builder();
                group_options o = group_options::from_hosts(hosts, r);
                o.formation_timeout = std::chrono::seconds(20);
                o.operation_timeout = std::chrono::seconds(20);
                group g = sync_wait(group::form(b, o));
                local_mr data = g.allocate(4096);
                std::memset(data.data(), r == 0 ? 0x42 : 0, 4096);
                sync_wait(g.broadcast(data, 0));
                if (data.data()[4095] != std::byte{0x42})
                    throw std::runtime_error("broadcast delivered the wrong bytes");
                sync_wait(g.barrier());
                if (r == 0)
                    note_held();
                sync_wait(g.barrier());
                sync_wait(g.close());
            } catch (const std::exception& e) {
                failures[r] = e.what();
            }
        };
        std::thread one(rank, 1);
        rank(0);
        one.join();
        CHECK(failures[0] == "");
        CHECK(failures[1] == "");
    });
}

// ---- Dropped, never closed: the last handle going closes gracefully ------

namespace {

/// Why the next message on `q` did not fail because the peer closed (its
/// disconnect reached us) within 30 s; empty if it did.
std::string next_after_peer_dropped(receive_queue& q) {
    try {
        sync_wait(q.next(std::chrono::seconds(30)));
        return "a message arrived";
    } catch (const std::system_error& e) {
        if (e.code() == std::errc::timed_out)
            return "nothing within 30 s: the peer was not told";
        return "";
    }
}

}  // namespace

TEST_CASE("a connection whose last handle is dropped with receives posted closes and gives everything back",
          "[resources]") {
    gives_everything_back("dropped connection", [] {
        builder b = device_builder();
        listener l = b.listen(fresh_address());
        auto [client, server] = sync_wait(pair_up(b, l));
        auto pool = b.pool();
        local_mr target = pool->allocate_zeroed(4096);
        sync_wait(write_and_read(client, &target, pool, 11));
        // Both sides keep receives posted, in queues (which hold handles);
        // then every client handle goes, none closed.
        std::optional<receive_queue> client_queue, server_queue;
        client_queue.emplace(client, 4, 64, pool);
        server_queue.emplace(server, 4, 64, pool);
        note_held();
        client = connection{};
        client_queue.reset();
        CHECK(next_after_peer_dropped(*server_queue) == "");
        // The server's side, broken by the client's disconnect: dropped too.
        server = connection{};
        server_queue.reset();
    });
}

TEST_CASE("a stream whose last handle is dropped ends cleanly for its peer and gives everything back",
          "[resources]") {
    gives_everything_back("dropped stream", [] {
        builder b = device_builder();
        stream_listener l = stream::serve(b, fresh_address());
        auto [server, client] = sync_wait(when_all(l.accept(), stream::connect(b, l.address())));
        std::vector<std::byte> out(100000, std::byte{0x5a}), in(out.size());
        sync_wait(client.write(out));
        note_held();
        client = stream{};  // written, never closed: what was written still arrives, then the end
        sync_wait(server.read_exactly(in));
        CHECK(in == out);
        std::array<std::byte, 16> more;
        CHECK(sync_wait(server.read(more)) == 0);
        server = stream{};
    });
}

TEST_CASE("an rpc client dropped without close gives everything back", "[resources]") {
    gives_everything_back("dropped rpc client", [] { rpc_round(std::byte{0x22}, false); });
}
