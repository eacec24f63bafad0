// The memory-region agent over real rxe connections: regions requested,
// granted, written, handed back, expired, released and refused, with user
// traffic flowing beside it.

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/log.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>
#include "agent/agent.hpp"
#include "engine/connection_state.hpp"
#include "engine/process_metrics.hpp"

#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;

namespace {

struct agent_fixture {
    explicit agent_fixture(agent_limits limits = {})
        : el(event_listener::start(test::open_test_device())),
          pool(memory_pool::create(protection_domain::create(el->device()))) {
        auto [a, b] = connect_loopback(el, {}, {}, pool, limits);
        client = a;
        server = b;
    }

    // Reads agent state on the event listener thread, where it lives.
    template <class F>
    auto on_listener(F f) {
        return sync_wait([&]() -> task<decltype(f())> {
            co_await el->schedule();
            co_return f();
        }());
    }

    std::size_t server_grants() {
        return on_listener([&] { return detail::agent_of(*detail::connection_access::state(server))->granted_regions(); });
    }

    // Both agents up (their receive buffers come from the pool too) and no
    // message buffer in flight: the pool's usage from here is the baseline.
    std::size_t settle() {
        { remote_mr warm_up = sync_wait(client.request_remote_mr(64)); }
        REQUIRE(eventually([&] { return server_grants() == 0; }));
        std::size_t before = pool->bytes_in_use();
        std::this_thread::sleep_for(50ms);
        REQUIRE(eventually([&] { return pool->bytes_in_use() == before; }));
        return before;
    }

    bool eventually(auto condition) {
        auto deadline = std::chrono::steady_clock::now() + 20s;
        while (!condition()) {
            if (std::chrono::steady_clock::now() > deadline)
                return false;
            std::this_thread::sleep_for(5ms);
        }
        return true;
    }

    std::shared_ptr<event_listener> el;
    std::shared_ptr<memory_pool> pool;
    connection client;
    connection server;
};

/// Keeps the library's log lines (cordma/log.hpp) from its construction on,
/// at `level`; the default sink and level come back when it goes.
class log_capture {
public:
    explicit log_capture(log_level level) {
        set_log_level(level);
        set_log_sink([this](log_level l, std::string_view line) {
            std::lock_guard lock(mutex_);
            lines_.push_back(std::string(to_string(l)) + " " + std::string(line));
        });
    }
    log_capture(const log_capture&) = delete;
    log_capture& operator=(const log_capture&) = delete;
    ~log_capture() {
        set_log_sink(nullptr);
        set_log_level(log_level::warning);
    }

    /// The first line (as "LEVEL text") holding every one of `parts`, or "".
    std::string find(std::initializer_list<std::string_view> parts) const {
        std::lock_guard lock(mutex_);
        for (const auto& line : lines_) {
            bool all = true;
            for (auto p : parts)
                all = all && line.find(p) != std::string::npos;
            if (all)
                return line;
        }
        return {};
    }
    std::string all() const {
        std::lock_guard lock(mutex_);
        std::string out;
        for (const auto& line : lines_)
            out += line + "\n";
        return out;
    }

private:
    mutable std::mutex mutex_;
    std::vector<std::string> lines_;
};

}  // namespace

TEST_CASE("request a region, write into it, hand it back: the owner reads what was written", "[agent]") {
    agent_fixture f;
    local_mr message = f.pool->allocate(64);
    std::memcpy(message.data(), "written by the client", 22);
    local_mr got = sync_wait([&]() -> task<local_mr> {
        remote_mr region = co_await f.client.request_remote_mr(4096);
        CHECK(region.size() == 4096);
        CHECK(region.deadline() > std::chrono::steady_clock::now());
        co_await f.client.write(message.slice(0, 22), region.slice(100, 22));
        co_await f.client.send_remote_mr(std::move(region));
        co_return co_await f.server.receive_local_mr();
    }());
    REQUIRE(got.size() == 4096);
    CHECK(std::memcmp(got.data() + 100, "written by the client", 22) == 0);
    CHECK(f.server_grants() == 0);
}

TEST_CASE("send_local_mr grants a region the peer reads with RDMA READ", "[agent]") {
    agent_fixture f;
    local_mr mine = f.pool->allocate(128);
    std::memcpy(mine.data(), "server memory", 14);
    local_mr into = f.pool->allocate(14);
    sync_wait([&]() -> task<void> {
        auto [sent, region] = co_await when_all(f.server.send_local_mr(mine.all()), f.client.receive_remote_mr());
        (void)sent;
        CHECK(region.size() == 128);
        co_await f.client.read(into.all(), region.slice(0, 14));
    }());
    CHECK(std::memcmp(into.data(), "server memory", 14) == 0);
}

TEST_CASE("a lease that runs out cuts the peer off and gives the owner its memory back", "[agent]") {
    agent_fixture f;
    local_mr data = f.pool->allocate(64);
    std::size_t baseline = f.settle();
    remote_mr region = sync_wait(f.client.request_remote_mr(8192, 64, 500ms));
    CHECK(f.eventually([&] { return f.pool->bytes_in_use() == baseline + 8192; }));
    sync_wait(f.client.write(data.all(), region.slice(0, 64)));  // within the lease: fine
    CHECK(f.eventually([&] { return f.server_grants() == 0; }));
    CHECK(f.eventually([&] { return f.pool->bytes_in_use() == baseline; }));
    try {
        sync_wait(f.client.write(data.all(), region.slice(0, 64)));
        FAIL("a write after the lease succeeded");
    } catch (const work_completion_error& e) {
        CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
    }
}

namespace {

// A sample of the process's metrics page (engine/process_metrics.hpp: what
// the endpoint serves), 0 if the page has no such line.
double page_value(const std::string& series) {
    std::string page = detail::process_prometheus({});
    std::size_t at = page.find("\n" + series + " ");
    return at == std::string::npos ? 0 : std::stod(page.substr(at + series.size() + 2));
}

}  // namespace

TEST_CASE("every grant is counted, by how it ended, and what each peer host holds now", "[agent][metrics]") {
    agent_limits limits;
    limits.max_region_size = 1 << 20;
    agent_fixture f(limits);
    f.settle();
    auto ended = [](const char* reason) {
        return page_value(std::string("cordma_agent_grants_ended_total{reason=\"") + reason + "\"}");
    };
    double grants = page_value("cordma_agent_grants_total"), denied = page_value("cordma_agent_requests_denied_total");
    double released = ended("released"), expired = ended("expired"), revoked = ended("revoked"),
           closed = ended("closed"), received = page_value("cordma_agent_regions_received_total");
    // The bytes held now by each peer host, as the page lists them.
    auto by_host = [] {
        std::map<std::string, double> out;
        std::string page = detail::process_prometheus({});
        const std::string prefix = "\ncordma_agent_granted_bytes{host=\"";
        for (std::size_t at = page.find(prefix); at != std::string::npos; at = page.find(prefix, at + 1)) {
            std::size_t end = page.find("\"} ", at + prefix.size());
            out[page.substr(at + prefix.size(), end - at - prefix.size())] = std::stod(page.substr(end + 3));
        }
        return out;
    };

    // Released: asked for, then dropped.
    { remote_mr r = sync_wait(f.client.request_remote_mr(4096)); }
    CHECK(f.eventually([&] { return ended("released") == released + 1; }));
    // Expired: a 300 ms lease.
    remote_mr leased = sync_wait(f.client.request_remote_mr(8192, 64, 300ms));
    CHECK(f.eventually([&] { return ended("expired") == expired + 1; }));
    // Revoked: granted by send_local_mr, then revoked by its owner.
    local_mr mine = f.pool->allocate(128);
    sync_wait([&]() -> task<void> {
        auto [sent, region] = co_await when_all(f.server.send_local_mr(mine.all()), f.client.receive_remote_mr());
        (void)sent;
        (void)region;
        std::size_t withdrawn = co_await f.server.revoke_local_mr(mine.all());
        CHECK(withdrawn == 1);
    }());
    CHECK(ended("revoked") == revoked + 1);
    // Denied: over max_region_size.
    CHECK_THROWS(sync_wait(f.client.request_remote_mr(2 << 20)));
    CHECK(page_value("cordma_agent_requests_denied_total") == denied + 1);
    // Held now: 64 KiB, pinned here for the peer host; ended as closed.
    remote_mr held = sync_wait(f.client.request_remote_mr(64 << 10));
    auto held_by = by_host();
    INFO("held by host: " << held_by.size() << " host(s)");
    REQUIRE(held_by.size() == 1);  // this connection's peer, the one host
    CHECK(held_by.begin()->second == 64 << 10);
    CHECK(page_value("cordma_agent_granted_bytes") == 64 << 10);
    CHECK(page_value("cordma_agent_granted_regions") == 1);
    CHECK(page_value("cordma_agent_grants_total") == grants + 4);
    CHECK(page_value("cordma_agent_regions_received_total") == received + 4);
    // The same, per connection: the server's agent granted, the client's
    // received; settle()'s warm-up request included (one grant more,
    // released), and both the expired lease and the revoke reach the
    // client as its peer's revocations.
    agent_counters here = f.server.agent_metrics(), there = f.client.agent_metrics();
    CHECK(here.grants == 5);
    CHECK(here.denied == 1);
    CHECK(here.released == 2);
    CHECK(here.expired == 1);
    CHECK(here.revoked == 1);
    CHECK(here.closed == 0);
    CHECK(here.unsent == 0);
    CHECK(here.received == 0);
    CHECK(here.granted_regions == 1);
    CHECK(here.granted_bytes == 64 << 10);
    CHECK(there.received == 5);
    CHECK(there.revoked_by_peer == 2);
    CHECK(there.grants == 0);
    CHECK(there.granted_bytes == 0);
    // (Loopback connections have no rdma_cm to carry a disconnect: each
    // side is closed.)
    sync_wait(f.client.close());
    sync_wait(f.server.close());
    CHECK(f.eventually([&] { return ended("closed") == closed + 1; }));
    CHECK(by_host().empty());
    CHECK(page_value("cordma_agent_granted_bytes") == 0);
    CHECK(page_value("cordma_agent_granted_regions") == 0);
    // Nothing counted twice.
    CHECK(ended("released") == released + 1);
    CHECK(ended("expired") == expired + 1);
    CHECK(ended("revoked") == revoked + 1);
}

TEST_CASE("dropping a remote region tells the owner, which frees it", "[agent]") {
    agent_fixture f;
    std::size_t baseline = f.settle();
    {
        remote_mr region = sync_wait(f.client.request_remote_mr(1 << 20));
        CHECK(f.server_grants() == 1);
        CHECK(f.pool->bytes_in_use() >= baseline + (1 << 20));
    }
    CHECK(f.eventually([&] { return f.server_grants() == 0; }));
    CHECK(f.eventually([&] { return f.pool->bytes_in_use() == baseline; }));
}

TEST_CASE("requests over the owner's limits are refused with the limit named, access narrowed; the connection stays up", "[agent]") {
    agent_limits limits;
    limits.max_region_size = 1 << 20;
    limits.max_regions = 2;
    limits.allowed_access = access_flags::remote_read;
    agent_fixture f(limits);
    CHECK_THROWS_WITH(sync_wait(f.client.request_remote_mr(2 << 20, 64, {}, access_flags::remote_read)),
                      Catch::Contains("exceeds the per-region limit of 1048576 bytes") &&
                          Catch::Contains("max_region_size"));
    CHECK_THROWS_WITH(sync_wait(f.client.request_remote_mr(4096, 64, {}, access_flags::remote_write)),
                      Catch::Contains("allowed_access"));
    remote_mr one = sync_wait(f.client.request_remote_mr(4096, 64, {}, access_flags::remote_read));
    // Asking for more than is allowed gets what is allowed, said by access().
    remote_mr two =
        sync_wait(f.client.request_remote_mr(4096, 64, {}, access_flags::remote_read | access_flags::remote_write));
    CHECK(two.access() == access_flags::remote_read);
    local_mr bytes = f.pool->allocate(16);
    CHECK_THROWS_AS(sync_wait(f.client.write(bytes.all(), two.slice(0, 16))), std::invalid_argument);
    CHECK_THROWS_WITH(sync_wait(f.client.request_remote_mr(4096, 64, {}, access_flags::remote_read)),
                      Catch::Contains("max_regions"));
    // Still connected: user traffic and agent traffic both work.
    local_mr out = f.pool->allocate(8), in = f.pool->allocate(8);
    auto r = sync_wait(when_all(f.server.recv(in.all()), f.client.send(out.all())));
    CHECK(std::get<0>(r).length == 8);
    local_mr into = f.pool->allocate(16);
    sync_wait(f.client.read(into.all(), one.slice(0, 16)));
}

TEST_CASE("agent traffic never mixes with 1,000 user messages on the same connection", "[agent]") {
    agent_fixture f;
    constexpr int messages = 1000;
    auto user = [&]() -> task<int> {
        local_mr in = f.pool->allocate(16), out = f.pool->allocate(16);
        int in_order = 0;
        for (int i = 0; i < messages; ++i) {
            std::memcpy(out.data(), &i, sizeof i);
            auto [got, sent] = co_await when_all(f.server.recv(in.all()), f.client.send(out.slice(0, sizeof i)));
            (void)sent;
            int value;
            std::memcpy(&value, in.data(), sizeof value);
            in_order += got.length == sizeof i && value == i;
        }
        co_return in_order;
    };
    auto agent_work = [&]() -> task<int> {
        int regions = 0;
        for (int i = 0; i < 50; ++i) {
            remote_mr r = co_await f.client.request_remote_mr(256);
            regions += r.size() == 256;
        }
        co_return regions;
    };
    auto [delivered, regions] = sync_wait(when_all(user(), agent_work()));
    CHECK(delivered == messages);
    CHECK(regions == 50);
}

TEST_CASE("a malformed agent message closes the connection with the problem named", "[agent]") {
    agent_fixture f;
    // Make sure both agents are up, then play a hostile peer on the client's
    // control channel.
    (void)sync_wait(f.client.request_remote_mr(64));
    local_mr garbage = f.pool->allocate(32);
    std::memset(garbage.data(), 0x7f, 32);
    log_capture log(log_level::info);
    connection control = f.on_listener([&] { return detail::agent_of(*detail::connection_access::state(f.client))->control(); });
    sync_wait(control.send(garbage.all()));
    CHECK(f.eventually([&] { return f.server.is_broken(); }));
    local_mr buffer = f.pool->allocate(8);
    CHECK_THROWS_WITH(sync_wait(f.server.send(buffer.all())),
                      Catch::Contains("agent protocol violation") && Catch::Contains("magic"));
    CHECK_THROWS_AS(sync_wait(f.server.request_remote_mr(64)), disconnected_error);
    // And the server's side says so through the log sink, as a warning, with
    // the problem named; its connection's end follows at info.
    INFO("the lines logged: " << log.all());
    CHECK(f.eventually([&] { return !log.find({"agent protocol violation", "magic"}).empty(); }));
    std::string violation = log.find({"agent protocol violation", "magic"});
    CHECK(violation.rfind("warning cordma: agent protocol violation by ", 0) == 0);
    CHECK(violation.find("; closing the connection") != std::string::npos);
    CHECK(f.eventually(
        [&] { return !log.find({"info cordma: connection to ", ") ended: agent protocol violation"}).empty(); }));
}

TEST_CASE("connections from the builder carry the agent over rdma_cm", "[agent][builder]") {
    log_capture log(log_level::debug);
    builder b;
    listener l = b.listen(test::test_address() + ":0");
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    // At debug, the log says each side's connection was set up.
    INFO("the lines logged: " << log.all());
    for (const std::string& peer : {client.peer(), server.peer()})
        CHECK_FALSE(log.find({"debug cordma: connection to " + peer + " (QP ", ") set up, with the agent"}).empty());
    auto pool = b.pool();
    local_mr message = pool->allocate(32);
    std::memcpy(message.data(), "over rdma_cm", 13);
    local_mr got = sync_wait([&]() -> task<local_mr> {
        remote_mr region = co_await client.request_remote_mr(1024);
        co_await client.write(message.slice(0, 13), region.slice(0, 13));
        co_await client.send_remote_mr(std::move(region));
        co_return co_await server.receive_local_mr();
    }());
    CHECK(std::memcmp(got.data(), "over rdma_cm", 13) == 0);
    // And the other way round, on a second QP pair to the same peer.
    auto [server2, client2] = sync_wait(when_all(l.accept(), client.new_connection()));
    local_mr shared = pool->allocate(64);
    std::memcpy(shared.data(), "client memory", 14);
    local_mr into = pool->allocate(14);
    sync_wait([&]() -> task<void> {
        auto [sent, region] = co_await when_all(client2.send_local_mr(shared.all()), server2.receive_remote_mr());
        (void)sent;
        co_await server2.read(into.all(), region.slice(0, 14));
    }());
    CHECK(std::memcmp(into.data(), "client memory", 14) == 0);
}

TEST_CASE("connections over the TCP endpoint exchange carry the agent too", "[agent][tcp]") {
    builder b;
    b.exchange(endpoint_exchange::tcp);
    listener l = b.listen(test::test_address() + ":0");
    auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
    auto pool = b.pool();
    local_mr message = pool->allocate(32);
    std::memcpy(message.data(), "over tcp", 9);
    local_mr got = sync_wait([&]() -> task<local_mr> {
        remote_mr region = co_await client.request_remote_mr(512);
        co_await client.write(message.slice(0, 9), region.slice(0, 9));
        co_await client.send_remote_mr(std::move(region));
        co_return co_await server.receive_local_mr();
    }());
    CHECK(std::memcmp(got.data(), "over tcp", 9) == 0);
}
