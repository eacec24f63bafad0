// The send queue's batching over real rxe loopback connections: work
// requests posted during a drain pass go out in one chain (one
// ibv_post_send), only some of them ask for a completion, and one
// completion resumes every coroutine whose request precedes it, in order.
// Inline data needs no local key. White box: reads the connection's
// counters of requests, doorbells and signalled requests.

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <tuple>

#include <catch2/catch.hpp>

#include <cordma/connection.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>
#include "engine/connection_state.hpp"

#include "support/loopback_pair.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

struct fixture {
    explicit fixture(polling_mode mode = polling_mode::event)
        : el(event_listener::start(test::open_test_device(), {.mode = mode})),
          pool(memory_pool::create(protection_domain::create(el->device()))) {
        qp_capacity capacity;  // 127 send entries: a completion retires at most 31
        std::tie(client, server) = test::adopted_pair(el, pool->pd(), capacity);
    }

    detail::connection_state& state() { return *detail::connection_access::state(client); }

    std::shared_ptr<event_listener> el;
    std::shared_ptr<memory_pool> pool;
    connection client;
    connection server;
};

struct counters {
    std::uint64_t requests = 0;
    std::uint64_t doorbells = 0;
    std::uint64_t signalled = 0;
};

// What the connection's metrics say of its send queue (metrics.hpp).
counters counts_of(const detail::connection_state& state) {
    connection_counters c = state.tally().read();
    return {c.work_requests, c.doorbells, c.signalled};
}

counters minus(const counters& a, const counters& b) {
    return {a.requests - b.requests, a.doorbells - b.doorbells, a.signalled - b.signalled};
}

std::uint64_t word_at(const local_mr& mr, std::size_t index) {
    std::uint64_t v;
    std::memcpy(&v, mr.data() + index * 8, 8);
    return v;
}

// Writes `value` from its own 8-byte source into word `index` of `target`;
// returns the completion status (IBV_WC_SUCCESS, or the error's).
task<int> write_word(fixture& f, local_slice source, std::uint64_t value, remote_slice target) {
    std::memcpy(source.data(), &value, 8);
    try {
        co_await f.client.write(source, target);
        co_return IBV_WC_SUCCESS;
    } catch (const work_completion_error& e) {
        co_return static_cast<int>(e.status());
    }
}

struct burst_result {
    counters outside;
    counters inside;
    std::vector<int> statuses;
};

// Eight writes started at once from outside a drain pass (each its own
// doorbell and completion), then eight more from a coroutine resumed by a
// completion, i.e. inside one (one chain, one completion). `bad`, if not
// negative, is the write of the second round whose rkey is forged.
task<burst_result> two_bursts(fixture& f, local_mr& sources, local_mr& target, int bad) {
    co_await f.el->schedule();
    burst_result r;
    counters c0 = counts_of(f.state());
    {
        std::vector<task<int>> writes;
        for (std::size_t i = 0; i < 8; ++i)
            writes.push_back(write_word(f, sources.slice(i * 8, 8), 100 + i, target.remote().slice(i * 8, 8)));
        for (int s : co_await when_all(std::move(writes)))
            r.statuses.push_back(s);
    }
    // Resumed by the last write's completion: inside a drain pass now.
    counters c1 = counts_of(f.state());
    {
        std::vector<task<int>> writes;
        for (std::size_t i = 8; i < 16; ++i) {
            remote_slice to = target.remote().slice(i * 8, 8);
            if (static_cast<int>(i - 8) == bad)
                to.rkey ^= 0x5a5a00;
            writes.push_back(write_word(f, sources.slice(i * 8, 8), 100 + i, to));
        }
        for (int s : co_await when_all(std::move(writes)))
            r.statuses.push_back(s);
    }
    counters c2 = counts_of(f.state());
    r.outside = minus(c1, c0);
    r.inside = minus(c2, c1);
    co_return r;
}

}  // namespace

TEST_CASE("requests posted in a drain pass go out as one chain with one completion", "[doorbell]") {
    fixture f(GENERATE(polling_mode::event, polling_mode::busy));
    INFO("polling mode " << to_string(f.el->options().mode));
    local_mr sources = f.pool->allocate(16 * 8);
    local_mr target = f.pool->allocate(16 * 8);
    std::memset(target.data(), 0, target.size());

    burst_result r = sync_wait(two_bursts(f, sources, target, -1));

    REQUIRE(r.statuses == std::vector<int>(16, IBV_WC_SUCCESS));
    for (std::size_t i = 0; i < 16; ++i) {
        INFO("word " << i);
        CHECK(word_at(target, i) == 100 + i);
    }
    // From a posted function (schedule): out at once, each signalled.
    CHECK(r.outside.requests == 8);
    CHECK(r.outside.doorbells == 8);
    CHECK(r.outside.signalled == 8);
    // From a completion: chained, one doorbell, the last one signalled.
    CHECK(r.inside.requests == 8);
    CHECK(r.inside.doorbells == 1);
    CHECK(r.inside.signalled == 1);
}

TEST_CASE("a failed request in a chain fails only itself and flushes what follows", "[doorbell]") {
    fixture f;
    local_mr sources = f.pool->allocate(16 * 8);
    local_mr target = f.pool->allocate(16 * 8);
    std::memset(target.data(), 0, target.size());

    burst_result r = sync_wait(two_bursts(f, sources, target, 3));

    REQUIRE(r.statuses.size() == 16);
    CHECK(r.inside.doorbells == 1);
    CHECK(r.inside.signalled == 1);
    // The three before the forged rkey were unsignalled: the error's
    // completion retires them as done, and their bytes are there.
    for (std::size_t i = 0; i < 11; ++i) {
        INFO("write " << i);
        CHECK(r.statuses[i] == IBV_WC_SUCCESS);
        CHECK(word_at(target, i) == 100 + i);
    }
    CHECK(r.statuses[11] == IBV_WC_REM_ACCESS_ERR);
    CHECK(word_at(target, 11) == 0);
    for (std::size_t i = 12; i < 16; ++i) {
        INFO("write " << i);
        CHECK(r.statuses[i] == IBV_WC_WR_FLUSH_ERR);
    }
    CHECK(f.client.is_broken());
}

namespace {

struct load_result {
    std::vector<std::uint32_t> posted;   // (coroutine << 16 | round), in posting order
    std::vector<std::uint32_t> resumed;  // the same, in resumption order
    std::size_t mismatches = 0;          // a resumed write whose bytes were not there
    counters seen;
};

task<void> writer(fixture& f, local_slice source, remote_slice to, const local_mr& target, std::size_t index,
                  std::uint32_t id, int rounds, load_result& r) {
    for (int round = 0; round < rounds; ++round) {
        std::uint64_t value = (std::uint64_t{id} << 32) | static_cast<std::uint32_t>(round);
        std::memcpy(source.data(), &value, 8);
        r.posted.push_back(id << 16 | static_cast<std::uint32_t>(round));
        co_await f.client.write(source, to);
        r.resumed.push_back(id << 16 | static_cast<std::uint32_t>(round));
        // Resumed means done: the bytes are at the target now.
        if (word_at(target, index) != value)
            ++r.mismatches;
    }
}

task<void> run_load(fixture& f, local_mr& sources, local_mr& target, std::uint32_t coroutines, int rounds,
                    load_result& r) {
    co_await f.el->schedule();
    counters before = counts_of(f.state());
    std::vector<task<void>> writers;
    for (std::uint32_t c = 0; c < coroutines; ++c)
        writers.push_back(writer(f, sources.slice(c * 8, 8), target.remote().slice(c * 8, 8), target, c, c,
                                 rounds, r));
    co_await when_all(std::move(writers));
    r.seen = minus(counts_of(f.state()), before);
}

}  // namespace

TEST_CASE("under load one completion resumes every earlier request, in posting order", "[doorbell]") {
    fixture f(GENERATE(polling_mode::event, polling_mode::busy));
    INFO("polling mode " << to_string(f.el->options().mode));
    constexpr std::uint32_t coroutines = 64;
    constexpr int rounds = 200;
    local_mr sources = f.pool->allocate(coroutines * 8);
    local_mr target = f.pool->allocate(coroutines * 8);
    std::memset(target.data(), 0, target.size());

    load_result r;
    sync_wait(run_load(f, sources, target, coroutines, rounds, r));

    REQUIRE(r.posted.size() == std::size_t{coroutines} * rounds);
    CHECK(r.resumed == r.posted);  // each exactly once, in the send queue's order
    CHECK(r.mismatches == 0);
    CHECK(r.seen.requests == std::uint64_t{coroutines} * rounds);
    // Batched and selectively signalled: far fewer system calls and
    // completions than requests. A completion retires at most 32.
    INFO("doorbells " << r.seen.doorbells << ", signalled " << r.seen.signalled << " for " << r.seen.requests
                      << " requests");
    CHECK(r.seen.doorbells * 4 < r.seen.requests);
    CHECK(r.seen.signalled * 4 < r.seen.requests);
    CHECK(r.seen.signalled * 32 >= r.seen.requests);
    for (std::uint32_t c = 0; c < coroutines; ++c)
        CHECK(word_at(target, c) == ((std::uint64_t{c} << 32) | (rounds - 1)));
}

TEST_CASE("inline sends and writes need no local key", "[doorbell]") {
    fixture f;
    const std::uint32_t max_inline = f.client.qp()->capacity().max_inline_data;
    REQUIRE(max_inline >= 8);
    INFO("max_inline_data " << max_inline);
    // Plain memory under a local key the device never issued: only a
    // request whose payload rides inside it can succeed.
    std::vector<std::byte> plain(max_inline + 1);
    for (std::size_t i = 0; i < plain.size(); ++i)
        plain[i] = static_cast<std::byte>(i * 7 + 3);
    auto block = std::make_shared<detail::mr_block>();
    block->data = plain.data();
    block->size = plain.size();
    block->lkey = 0x0badc0de;
    local_slice unregistered(block, plain.data(), plain.size());

    local_mr target = f.pool->allocate(plain.size());
    local_mr inbox = f.pool->allocate(plain.size());
    std::memset(target.data(), 0, target.size());

    auto run = [&]() -> task<int> {
        // Up to max_inline_data: inline, so the bogus key is never looked at.
        co_await f.client.write(unregistered.slice(0, max_inline), target.remote().slice(0, max_inline));
        auto [got, sent] = co_await when_all(f.server.recv(inbox.all()), f.client.send(unregistered.slice(0, max_inline)));
        (void)sent;
        if (got.length != max_inline)
            co_return -1;
        // One byte more: the device reads the buffer through the key and
        // refuses it.
        try {
            co_await f.client.write(unregistered, target.remote());
        } catch (const work_completion_error& e) {
            co_return static_cast<int>(e.status());
        }
        co_return IBV_WC_SUCCESS;
    };
    int status = sync_wait(run());
    CHECK(std::memcmp(target.data(), plain.data(), max_inline) == 0);
    CHECK(std::memcmp(inbox.data(), plain.data(), max_inline) == 0);
    // rxe reports a key it never issued as a local QP operation error;
    // hardware as a protection error. Either way: not inline, refused.
    CHECK((status == IBV_WC_LOC_PROT_ERR || status == IBV_WC_LOC_QP_OP_ERR));
}
