// receive_queue over real rxe connections: receives posted ahead of the
// peer's sends, drained in arrival order; cancellation and timeouts that
// lose nothing; the hand-over to and from plain recv; a broken connection;
// messages that outlive their queue (also run under AddressSanitizer).

#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <tuple>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"
#include "support/loopback_pair.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;

namespace {

// Two connections joined on one device (as in operations_test), served by
// one event listener; the pool is on their PD.
struct fixture {
    explicit fixture(qp_capacity capacity = {})
        : el(event_listener::start(test::open_test_device())),
          pool(memory_pool::create(protection_domain::create(el->device()))) {
        std::tie(client, server) = test::adopted_pair(el, pool->pd(), capacity);
    }

    // Receives a queue leaves posted keep their connection alive until they
    // complete: shut both down (flushing them), then wait, for at most
    // 10 s, until everything is gone, so LeakSanitizer sees nothing.
    ~fixture() {
        client.shut_down();
        server.shut_down();
        std::weak_ptr<event_listener> weak_listener = el;
        std::weak_ptr<memory_pool> weak_pool = pool;
        client = {};
        server = {};
        el.reset();
        pool.reset();
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!(weak_listener.expired() && weak_pool.expired()) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(1ms);
    }
    fixture(const fixture&) = delete;
    fixture& operator=(const fixture&) = delete;

    std::shared_ptr<event_listener> el;
    std::shared_ptr<memory_pool> pool;
    connection client;
    connection server;
};

// Message i: its number in the first 4 bytes, then a pattern from it.
void fill(local_slice s, std::uint32_t i) {
    std::memcpy(s.data(), &i, 4);
    for (std::size_t k = 4; k < s.size(); ++k)
        s.data()[k] = static_cast<std::byte>((k * 7 + i) & 0xff);
}

std::size_t length_of(std::uint32_t i) { return 4 + (i * 37) % 200; }

// The number of a message, after checking every byte of it; ~0u if any is wrong.
std::uint32_t check(const received_message& m) {
    std::uint32_t i = 0;
    if (m.size() < 4)
        return ~0u;
    std::memcpy(&i, m.data(), 4);
    if (m.size() != length_of(i))
        return ~0u;
    for (std::size_t k = 4; k < m.size(); ++k)
        if (m.data()[k] != static_cast<std::byte>((k * 7 + i) & 0xff))
            return ~0u;
    return i;
}

// Sends messages first..last-1, one after another (each acknowledged, so
// it has landed in a posted receive), every third with an immediate.
task<void> send_range(connection c, std::shared_ptr<memory_pool> pool, std::uint32_t first, std::uint32_t last) {
    local_mr out = pool->allocate(256);
    for (std::uint32_t i = first; i < last; ++i) {
        local_slice s = out.slice(0, length_of(i));
        fill(s, i);
        if (i % 3 == 0)
            co_await c.send_with_imm(s, 1000 + i);
        else
            co_await c.send(s);
    }
}

}  // namespace

TEST_CASE("a burst sent before anyone awaits next() arrives whole and in order", "[receive_queue]") {
    fixture f;
    receive_queue q(f.server, 16, 256, f.pool);
    REQUIRE(q.size() == 16);
    // Every send completes (is acknowledged) before anyone receives: the
    // messages sit in the queue's posted buffers.
    sync_wait(send_range(f.client, f.pool, 0, 16));
    auto numbers = sync_wait([&]() -> task<std::vector<std::uint32_t>> {
        std::vector<std::uint32_t> got;
        for (int k = 0; k < 16; ++k) {
            received_message m = co_await q.next();
            std::uint32_t i = check(m);
            got.push_back(i);
            CHECK(m.imm() == (i % 3 == 0 ? std::optional<std::uint32_t>(1000 + i) : std::nullopt));
        }
        co_return got;
    }());
    std::vector<std::uint32_t> expected(16);
    for (std::uint32_t i = 0; i < 16; ++i)
        expected[i] = i;
    CHECK(numbers == expected);

    SECTION("and buffers released are posted again: 200 more through 16 buffers, drained while sent") {
        auto more = sync_wait([&]() -> task<std::vector<std::uint32_t>> {
            std::vector<std::uint32_t> got;
            auto drain = [&]() -> task<void> {
                for (int k = 0; k < 200; ++k) {
                    received_message m = co_await q.next();  // released at the end of each pass
                    got.push_back(check(m));
                }
            };
            co_await when_all(drain(), send_range(f.client, f.pool, 16, 216));
            co_return got;
        }());
        REQUIRE(more.size() == 200);
        for (std::uint32_t k = 0; k < 200; ++k)
            CHECK(more[k] == 16 + k);
    }
}

TEST_CASE("messages held by the user stay valid until released, and the queue refills", "[receive_queue]") {
    fixture f;
    receive_queue q(f.server, 2, 256);  // buffers registered for the queue alone
    sync_wait(send_range(f.client, f.pool, 0, 2));
    auto [a, b] = sync_wait([&]() -> task<std::pair<received_message, received_message>> {
        received_message x = co_await q.next();
        received_message y = co_await q.next();
        co_return std::pair{std::move(x), std::move(y)};
    }());
    CHECK(check(a) == 0);
    CHECK(check(b) == 1);
    CHECK(a.buffer().size() == 256);
    CHECK(a.buffer().data() == a.data());
    CHECK(a.data() != b.data());
    // Both buffers are held: nothing is posted, so nothing more can arrive
    // (a next() with a timeout says so, and takes nothing).
    CHECK_THROWS_MATCHES(sync_wait(q.next(50ms)), std::system_error,
                         Catch::Predicate<std::system_error>([](const std::system_error& e) {
                             return e.code() == std::errc::timed_out &&
                                    std::string(e.what()).find("no message within 50 ms") != std::string::npos;
                         }));
    a.release();
    CHECK_FALSE(a);
    CHECK(a.bytes().empty());
    sync_wait(send_range(f.client, f.pool, 2, 3));
    received_message c = sync_wait(q.next());
    CHECK(check(c) == 2);
    CHECK(c.data() != b.data());  // the released buffer, posted again
    CHECK(check(b) == 1);         // untouched while held
}

TEST_CASE("a cancelled next() loses nothing: a later message goes to the next next()", "[receive_queue]") {
    fixture f;
    receive_queue q(f.server, 8, 256, f.pool);

    SECTION("stopped while waiting, from another thread") {
        std::stop_source stop;
        std::thread canceller;
        auto outcome = sync_wait([&]() -> task<std::string> {
            co_await f.el->schedule();
            // The cancel comes once this coroutine is waiting inside next().
            auto wait = [&]() -> task<std::string> {
                try {
                    received_message m = co_await q.next(stop.get_token());
                    co_return "got message " + std::to_string(check(m));
                } catch (const operation_cancelled& e) {
                    co_return e.what();
                }
            };
            auto cancel = [&]() -> task<void> {
                canceller = std::thread([&] { stop.request_stop(); });
                co_return;
            };
            auto [text, unused] = co_await when_all(wait(), cancel());
            (void)unused;
            co_return text;
        }());
        canceller.join();
        CHECK_THAT(outcome, Catch::Contains("receive_queue::next to client") && Catch::Contains("no message was taken"));
        sync_wait(send_range(f.client, f.pool, 0, 1));
        CHECK(check(sync_wait(q.next())) == 0);
    }

    SECTION("a timeout that runs out") {
        CHECK_THROWS_AS(sync_wait(q.next(20ms)), std::system_error);
        sync_wait(send_range(f.client, f.pool, 0, 1));
        CHECK(check(sync_wait(q.next(10s))) == 0);
    }

    SECTION("already stopped: nothing is taken even when a message is there") {
        sync_wait(send_range(f.client, f.pool, 0, 1));
        std::stop_source stop;
        stop.request_stop();
        CHECK_THROWS_AS(sync_wait(q.next(stop.get_token())), operation_cancelled);
        CHECK(check(sync_wait(q.next())) == 0);
    }

    SECTION("300 cancels racing 300 arrivals: every message arrives exactly once, in order") {
        std::vector<std::uint32_t> got;
        int cancelled = 0;
        sync_wait([&]() -> task<void> {
            local_mr out = f.pool->allocate(256);
            for (std::uint32_t i = 0; i < 300; ++i) {
                std::stop_source stop;
                auto receiver = [&]() -> task<void> {
                    try {
                        received_message m = co_await q.next(stop.get_token());
                        got.push_back(check(m));
                    } catch (const operation_cancelled&) {
                        ++cancelled;
                    }
                };
                auto sender = [&]() -> task<void> {
                    local_slice s = out.slice(0, length_of(i));
                    fill(s, i);
                    co_await f.client.send(s);
                    stop.request_stop();  // races the receive completion on the event el
                };
                co_await when_all(receiver(), sender());
            }
            // What a cancelled next() did not take is still there, in order.
            while (got.size() < 300) {
                received_message m = co_await q.next(5s);
                got.push_back(check(m));
            }
        }());
        INFO(cancelled << " of 300 next() calls were cancelled");
        REQUIRE(got.size() == 300);
        for (std::uint32_t i = 0; i < 300; ++i)
            CHECK(got[i] == i);
    }
}

TEST_CASE("a receive_queue and plain recv hand messages over without losing one", "[receive_queue]") {
    fixture f;
    local_mr in = f.pool->allocate(256);

    SECTION("recv on a connection with a queue is refused by name") {
        receive_queue q(f.server, 4, 256, f.pool);
        CHECK_THROWS_WITH(sync_wait(f.server.recv(in.all())),
                          Catch::Contains("connection::recv to client: a receive_queue owns this connection's receives"));
        CHECK_THROWS_WITH(receive_queue(f.server, 1, 64),
                          Catch::Contains("another receive_queue already owns this connection's receives"));
        // The refused recv posted nothing: the queue still gets the message.
        sync_wait(send_range(f.client, f.pool, 0, 1));
        CHECK(check(sync_wait(q.next())) == 0);
    }

    SECTION("a queue's posted receives and untaken messages go to the next recvs after it is destroyed") {
        {
            receive_queue q(f.server, 4, 256, f.pool);
            sync_wait(send_range(f.client, f.pool, 0, 3));
            CHECK(check(sync_wait(q.next())) == 0);
        }
        auto number = [&](recv_result r) {
            std::uint32_t i = 0;
            std::memcpy(&i, in.data(), 4);
            return r.length == length_of(i) ? i : ~0u;
        };
        CHECK(number(sync_wait(f.server.recv(in.all()))) == 1);
        CHECK(number(sync_wait(f.server.recv(in.all()))) == 2);
        // Message 3 lands in one of the queue's buffers, still posted: the
        // next recv gets it, copied into its own buffer.
        auto [r, unused] = sync_wait(when_all(f.server.recv(in.all()), send_range(f.client, f.pool, 3, 4)));
        (void)unused;
        CHECK(number(r) == 3);
        CHECK(r.imm == std::optional<std::uint32_t>(1003));
    }

    SECTION("a queue is refused while a recv is posted, and takes over what a cancelled recv left") {
        std::stop_source stop;
        std::string cancelled;
        sync_wait([&]() -> task<void> {
            co_await f.el->schedule();
            // when_all starts its children in order, on this thread: the recv
            // is posted before the second child runs.
            auto posted_recv = [&]() -> task<void> {
                try {
                    (void)co_await f.server.recv(in.all(), stop.get_token());
                } catch (const operation_cancelled& e) {
                    cancelled = e.what();
                }
            };
            auto refuse_then_cancel = [&]() -> task<void> {
                CHECK_THROWS_WITH(receive_queue(f.server, 4, 256, f.pool),
                                  Catch::Contains("1 recv operation is still posted or waiting on it"));
                stop.request_stop();
                co_return;
            };
            co_await when_all(posted_recv(), refuse_then_cancel());
        }());
        CHECK_THAT(cancelled, Catch::Contains("cancelled after its receive was posted"));
        receive_queue q(f.server, 4, 256, f.pool);
        sync_wait(send_range(f.client, f.pool, 0, 2));
        // Message 0 landed in the cancelled recv's buffer, taken over by the
        // queue; message 1 in the queue's own.
        received_message m0 = sync_wait(q.next());
        CHECK(check(m0) == 0);
        CHECK(m0.data() == in.data());
        CHECK(check(sync_wait(q.next())) == 1);
    }
}

TEST_CASE("a broken connection wakes next() with its error, after every message that arrived", "[receive_queue]") {
    SECTION("the peer closes: disconnected_error naming it") {
        builder b;
        listener l = b.listen(test::test_address() + ":0");
        auto [server, client] = sync_wait(when_all(l.accept(), b.connect(l.address())));
        receive_queue q(server, 8, 256, b.pool());
        sync_wait(send_range(client, b.pool(), 0, 3));
        auto [numbers, error] = sync_wait([&]() -> task<std::pair<std::vector<std::uint32_t>, std::string>> {
            co_await b.event_listener()->schedule();
            std::vector<std::uint32_t> got;
            std::string what;
            auto drain = [&]() -> task<void> {
                try {
                    for (;;)
                        got.push_back(check(co_await q.next(30s)));  // waits after the third
                } catch (const disconnected_error& e) {
                    what = e.what();
                }
            };
            co_await when_all(drain(), client.close());
            co_return std::pair{got, what};
        }());
        CHECK(numbers == std::vector<std::uint32_t>{0, 1, 2});
        CHECK_THAT(error, Catch::StartsWith("receive_queue::next to ") && Catch::Contains("not connected"));
        // And again at once, for a later next().
        CHECK_THROWS_AS(sync_wait(q.next()), disconnected_error);
    }

    SECTION("a message longer than the buffers: its receive's work_completion_error") {
        fixture f;
        receive_queue q(f.server, 4, 64, f.pool);
        local_mr big = f.pool->allocate(200);
        sync_wait(send_range(f.client, f.pool, 0, 1));
        std::string sender_error;
        auto [first, error] = sync_wait([&]() -> task<std::pair<std::uint32_t, std::string>> {
            std::uint32_t n = check(co_await q.next());
            std::string what;
            auto drain = [&]() -> task<void> {
                try {
                    (void)co_await q.next(30s);
                } catch (const work_completion_error& e) {
                    // The verbs say local length error; rxe reports a local
                    // QP operation error for the same thing.
                    bool expected = e.status() == IBV_WC_LOC_LEN_ERR || e.status() == IBV_WC_LOC_QP_OP_ERR;
                    what = std::string(expected ? "expected status" : ibv_wc_status_str(e.status())) + "|" + e.what();
                }
            };
            auto oversend = [&]() -> task<void> {
                try {
                    co_await f.client.send(big.all());
                } catch (const work_completion_error& e) {
                    sender_error = e.what();
                }
            };
            co_await when_all(drain(), oversend());
            co_return std::pair{n, what};
        }());
        CHECK(first == 0);
        CHECK_THAT(error, Catch::StartsWith("expected status|receive_queue::next to client: local "));
        // Both ends say what happened, not only the status.
        CHECK_THAT(error, Catch::Contains("a message longer than the posted receive buffer arrived"));
        INFO("the sender's error: " << sender_error);
        CHECK((sender_error.empty() || sender_error.find("longer than the receive the peer posted") != std::string::npos ||
               sender_error.find("too long for its receive") != std::string::npos ||
               sender_error.find("flushed") != std::string::npos));
        CHECK(f.server.is_broken());
    }
}

TEST_CASE("a message outlives its queue and connection handles, and frees its buffer when released",
          "[receive_queue]") {
    std::size_t baseline = 0;
    std::weak_ptr<memory_pool> weak_pool;
    received_message kept;
    {
        fixture f;
        weak_pool = f.pool;
        baseline = f.pool->bytes_in_use();
        {
            receive_queue q(f.server, 4, 256, f.pool);
            CHECK(f.pool->bytes_in_use() == baseline + 4 * 256);
            sync_wait(send_range(f.client, f.pool, 0, 2));
            kept = sync_wait(q.next());
        }
        // The queue is gone; its other buffers went back to the connection
        // (posted receives, one kept message), the held one is ours.
        CHECK(check(kept) == 0);
        f.server.shut_down();
    }
    // Every handle is gone but the message's: its bytes are still there.
    CHECK(check(kept) == 0);
    REQUIRE_FALSE(weak_pool.expired());
    kept.release();
    // The release runs on the event listener thread; then everything goes.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!weak_pool.expired() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
    CHECK(weak_pool.expired());
}

TEST_CASE("steady-state next() and release allocate nothing", "[receive_queue][allocation]") {
    fixture f;
    receive_queue q(f.server, 8, 64, f.pool);
    local_mr out = f.pool->allocate(64);
    auto allocations = sync_wait([&]() -> task<std::uint64_t> {
        co_await f.client.send(out.all());
        (void)co_await q.next();
        REQUIRE(f.el->running_in_this_thread());
        testing::allocation_counter counter;
        for (int i = 0; i < 1000; ++i) {
            co_await f.client.send_with_imm(out.all(), static_cast<std::uint32_t>(i));
            received_message m = co_await q.next();
            if (m.imm() != std::optional<std::uint32_t>(static_cast<std::uint32_t>(i)))
                co_return ~0ull;
        }
        co_return counter.all_threads().allocations;
    }());
    CHECK(allocations == 0);
}

TEST_CASE("bad arguments to receive_queue are refused by name", "[receive_queue]") {
    fixture f;
    CHECK_THROWS_WITH(receive_queue(connection{}, 4, 64), Catch::Contains("receive_queue: an empty connection"));
    CHECK_THROWS_WITH(receive_queue(f.server, 0, 64), Catch::Contains("count and buffer_size must both be at least 1"));
    CHECK_THROWS_WITH(receive_queue(f.server, 128, 64),
                      Catch::Contains("receive_queue(count=128, buffer_size=64) on the connection to client") &&
                          Catch::Contains("has only 127 entries") && Catch::Contains("builder::recv_queue_depth"));
    std::vector<std::byte> raw(64);
    local_mr read_only = register_local_mr(f.pool->pd(), raw.data(), raw.size(), access_flags::remote_read);
    CHECK_THROWS_WITH(receive_queue(f.server, std::vector<local_slice>{f.pool->allocate(64).all(), read_only.all()}),
                      Catch::Contains("buffer 1 is registered with") && Catch::Contains("without local_write"));
    receive_queue empty;
    CHECK_THROWS_WITH((void)empty.next(), Catch::Contains("receive_queue::next: an empty receive_queue"));
    // Nothing was posted by the refused ones: a queue of all 127 fits.
    receive_queue full(f.server, 127, 64, f.pool);
    CHECK(full.size() == 127);
}
