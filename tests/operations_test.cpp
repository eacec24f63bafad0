// Awaitable operations over real rxe loopback connections, driven by the
// event listener: bytes checked after every operation.

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <future>
#include <cstring>
#include <stop_token>
#include <thread>
#include <vector>

#include <tuple>

#include <catch2/catch.hpp>

#include <cordma/connection.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"
#include "support/loopback_pair.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

struct fixture {
    explicit fixture(polling_mode mode = polling_mode::event, qp_capacity capacity = {})
        : el(event_listener::start(test::open_test_device(), {.mode = mode})),
          pool(memory_pool::create(protection_domain::create(el->device()))) {
        // The pool's PD must be the connections' PD: build the pair on it.
        auto [a, b] = connect_on(pool->pd(), capacity);
        client = a;
        server = b;
    }

    std::pair<connection, connection> connect_on(std::shared_ptr<protection_domain> pd, qp_capacity capacity) {
        qp_connect_options options;
        options.min_rnr_timer = 20;  // RNR test: wait ~10 ms per retry
        return test::adopted_pair(el, pd, capacity, options);
    }

    local_mr filled(std::size_t size, unsigned seed) {
        local_mr mr = pool->allocate(size);
        for (std::size_t i = 0; i < size; ++i)
            mr.data()[i] = static_cast<std::byte>((i * 13 + seed) & 0xff);
        return mr;
    }

    std::shared_ptr<event_listener> el;
    std::shared_ptr<memory_pool> pool;
    connection client;
    connection server;
};

bool same_bytes(const local_slice& a, const local_slice& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

TEST_CASE("every operation moves real bytes", "[operations]") {
    fixture f(GENERATE(polling_mode::event, polling_mode::busy, polling_mode::adaptive, polling_mode::yielding));
    INFO("polling mode " << to_string(f.el->options().mode));

    SECTION("send lands in recv, with and without an immediate") {
        local_mr out = f.filled(3000, 1);
        local_mr in = f.pool->allocate(4096);
        auto [got, got_imm] = sync_wait([&]() -> task<std::pair<recv_result, recv_result>> {
            auto [first, second, sent, sent_imm] = co_await when_all(
                f.server.recv(in.slice(0, 4000)), f.server.recv(in.slice(0, 4000)), f.client.send(out.slice(0, 10)),
                f.client.send_with_imm(out.all(), 0xdeadbeef));
            (void)sent;
            (void)sent_imm;
            co_return std::pair{first, second};
        }());
        CHECK(got.length == 10);
        CHECK_FALSE(got.imm.has_value());
        CHECK(got_imm.length == 3000);
        REQUIRE(got_imm.imm.has_value());
        CHECK(*got_imm.imm == 0xdeadbeef);
        CHECK(same_bytes(in.slice(0, 3000), out.all()));
    }

    SECTION("write, write_with_imm and read") {
        local_mr source = f.filled(8192, 2);
        local_mr target = f.pool->allocate(8192);
        local_mr back = f.pool->allocate(8192);
        auto imm = sync_wait([&]() -> task<recv_result> {
            co_await f.client.write(source.slice(0, 4096), target.remote().slice(0, 4096));
            auto [r, w] = co_await when_all(f.server.recv_imm(),
                                            f.client.write_with_imm(source.slice(4096), target.remote().slice(4096), 42));
            (void)w;
            co_await f.client.read(back.all(), target.remote());
            co_return r;
        }());
        CHECK(same_bytes(target.all(), source.all()));
        CHECK(same_bytes(back.all(), source.all()));
        CHECK(imm.imm == std::optional<std::uint32_t>(42));
        CHECK(imm.length == 4096);
    }

    SECTION("scatter/gather lists gather on write and scatter on read and recv") {
        local_mr a = f.filled(100, 3), b = f.filled(200, 4), target = f.pool->allocate(300);
        local_mr x = f.pool->allocate(150), y = f.pool->allocate(150);
        sync_wait([&]() -> task<void> {
            local_slice gather[] = {a.all(), b.all()};
            co_await f.client.write(gather, target.remote());
            local_slice scatter[] = {x.all(), y.all()};
            co_await f.client.read(scatter, target.remote());
        }());
        CHECK(std::memcmp(target.data(), a.data(), 100) == 0);
        CHECK(std::memcmp(target.data() + 100, b.data(), 200) == 0);
        CHECK(std::memcmp(x.data(), target.data(), 150) == 0);
        CHECK(std::memcmp(y.data(), target.data() + 150, 150) == 0);
    }

    SECTION("atomics return the old value") {
        local_mr word = f.pool->allocate(16);
        std::uint64_t start = 1000;
        std::memcpy(word.data(), &start, 8);
        auto [old1, old2, failed_swap, swapped] = sync_wait([&]() -> task<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>> {
            std::uint64_t o1 = co_await f.client.fetch_add(word.remote(), 5);
            std::uint64_t o2 = co_await f.client.fetch_add(word.remote(), 7);
            std::uint64_t o3 = co_await f.client.compare_swap(word.remote(), 1, 99);
            std::uint64_t o4 = co_await f.client.compare_swap(word.remote(), 1012, 77);
            co_return std::tuple{o1, o2, o3, o4};
        }());
        CHECK(old1 == 1000);
        CHECK(old2 == 1005);
        CHECK(failed_swap == 1012);
        CHECK(swapped == 1012);
        std::uint64_t now;
        std::memcpy(&now, word.data(), 8);
        CHECK(now == 77);
    }
}

TEST_CASE("bad arguments are refused before anything is posted", "[operations]") {
    fixture f;
    local_mr mr = f.pool->allocate(64);
    CHECK_THROWS_WITH(mr.slice(60, 8), Catch::Contains("offset=60, length=8") && Catch::Contains("out of range"));
    CHECK_THROWS_WITH(mr.remote().slice(65), Catch::Contains("remote_slice{") && Catch::Contains("offset=65"));
    CHECK_THROWS_AS((void)f.client.fetch_add(mr.remote().slice(4), 1), std::invalid_argument);
    CHECK_THROWS_WITH((void)f.client.write(mr.slice(0, 10), mr.remote()),
                      Catch::Contains("local length 10 differs"));
    local_mr empty;
    CHECK_THROWS_AS((void)f.client.send(local_slice{}), std::invalid_argument);
    // Nothing reached the wire: the connection still works.
    local_mr in = f.pool->allocate(64);
    auto r = sync_wait(when_all(f.server.recv(in.all()), f.client.send(mr.all())));
    CHECK(std::get<0>(r).length == 64);
}

TEST_CASE("1,000 concurrent coroutines share a send queue of 64", "[operations]") {
    qp_capacity capacity;
    capacity.max_send_wr = 64;
    fixture f(polling_mode::event, capacity);
    REQUIRE(f.client.qp()->capacity().max_send_wr < 1000);
    constexpr std::size_t count = 1000;
    local_mr source = f.filled(count * 8, 5);
    local_mr target = f.pool->allocate(count * 8);
    std::vector<task<void>> writers;
    for (std::size_t i = 0; i < count; ++i)
        writers.push_back([](connection c, local_slice from, remote_slice to) -> task<void> {
            co_await c.write(from, to);
        }(f.client, source.slice(i * 8, 8), target.remote().slice(i * 8, 8)));
    sync_wait(when_all(std::move(writers)));
    CHECK(same_bytes(target.all(), source.all()));
}

TEST_CASE("a timer fires on time while completions never stop coming", "[operations][polling]") {
    // 128 coroutines each writing and reading back without pause keep the
    // CQ busy for as long as they run, every completion posting the next
    // request. The event listener must still look at io_uring (timers,
    // posted functions, rdma_cm events) between drains: here the only way
    // the writers stop is a 200 ms timer. (Before drains were bounded, it
    // fired only once the load had ended on its own.)
    for (polling_mode mode : {polling_mode::event, polling_mode::adaptive}) {
        DYNAMIC_SECTION("mode " << static_cast<int>(mode)) {
            fixture f(mode);
            constexpr std::size_t workers = 128, size = 64;
            constexpr std::uint64_t cap = 400'000;  // ends a starved run anyway, for the message below
            local_mr source = f.filled(workers * size, 9);
            local_mr back = f.pool->allocate(workers * size);
            local_mr target = f.pool->allocate(workers * size);
            std::atomic<bool> stop{false};
            std::atomic<std::uint64_t> done{0};
            auto began = std::chrono::steady_clock::now();
            std::chrono::steady_clock::time_point fired{};
            // call_after belongs to the listener thread: armed there.
            std::shared_ptr<event_listener::timer> timer;
            std::promise<void> armed;
            f.el->post([&] {
                timer = f.el->call_after(std::chrono::milliseconds(200), [&] {
                    fired = std::chrono::steady_clock::now();
                    stop = true;
                });
                armed.set_value();
            });
            REQUIRE(armed.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
            std::vector<task<void>> loops;
            for (std::size_t i = 0; i < workers; ++i)
                loops.push_back([](connection c, local_slice from, local_slice into, remote_slice to,
                                   std::atomic<bool>* stop, std::atomic<std::uint64_t>* done) -> task<void> {
                    while (!*stop && *done < cap) {
                        co_await c.write(from, to);
                        co_await c.read(into, to);
                        ++*done;
                    }
                }(f.client, source.slice(i * size, size), back.slice(i * size, size),
                  target.remote().slice(i * size, size), &stop, &done));
            sync_wait(when_all(std::move(loops)));
            REQUIRE(stop);
            double late_ms = std::chrono::duration<double, std::milli>(fired - began).count() - 200;
            INFO(done << " write+read pairs; the 200 ms timer fired " << late_ms << " ms late");
            CHECK(done < cap);
            CHECK(late_ms < 2000);
            CHECK(same_bytes(back.all(), source.all()));
        }
    }
}

TEST_CASE("recv may be posted before or after the matching send", "[operations]") {
    fixture f;
    local_mr out = f.filled(512, 6);
    local_mr in = f.pool->allocate(512);
    SECTION("before") {
        auto r = sync_wait(when_all(f.server.recv(in.all()), f.client.send(out.all())));
        CHECK(std::get<0>(r).length == 512);
    }
    SECTION("after: the sender retries on receiver-not-ready") {
        auto r = sync_wait([&]() -> task<recv_result> {
            auto late_recv = [&]() -> task<recv_result> {
                // Let the send reach the receiver first (RNR NAK), then post.
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                co_return co_await f.server.recv(in.all());
            };
            auto [sent, got] = co_await when_all(f.client.send(out.all()), late_recv());
            (void)sent;
            co_return got;
        }());
        CHECK(r.length == 512);
    }
    CHECK(same_bytes(in.all(), out.all()));
}

TEST_CASE("a write to a bad rkey fails with a remote access error and flushes the rest", "[operations]") {
    fixture f;
    local_mr source = f.filled(64, 7);
    local_mr target = f.pool->allocate(64);
    remote_slice bad = target.remote();
    bad.rkey ^= 0x5a5a;
    auto attempt = [](operation<void> op) -> task<std::string> {
        try {
            co_await std::move(op);
            co_return "ok";
        } catch (const work_completion_error& e) {
            co_return std::string(ibv_wc_status_str(e.status())) + "|" + e.what();
        }
    };
    auto results = sync_wait([&]() -> task<std::vector<std::string>> {
        // Post all nine back to back from the event listener thread, so they are
        // on the wire together when the first one fails.
        co_await f.el->schedule();
        std::vector<task<std::string>> tasks;
        tasks.push_back(attempt(f.client.write(source.all(), bad)));
        for (int i = 0; i < 8; ++i)
            tasks.push_back(attempt(f.client.write(source.all(), target.remote())));
        co_return co_await when_all(std::move(tasks));
    }());
    INFO(results[0]);
    CHECK_THAT(results[0], Catch::StartsWith("remote access error|write to server: remote access error"));
    // The flushed ones say which failure flushed them.
    for (std::size_t i = 1; i < results.size(); ++i)
        CHECK_THAT(results[i], Catch::StartsWith("Work Request Flushed Error|write to server: Work Request Flushed "
                                                 "Error") &&
                                   Catch::Contains("flushed: an earlier write failed with remote access error"));
    // New operations fail at once, naming why (and what the status means).
    CHECK_THROWS_WITH(sync_wait(f.client.write(source.all(), target.remote())),
                      Catch::StartsWith("write to server: not connected: an earlier write failed with remote access "
                                        "error (status 10): the peer's device refused the access"));
}

namespace {

// Posts a recv into `buffer` with `token`, then (in the same pass on the
// event listener thread, so certainly after the posting) stops it. Returns
// what the cancelled recv threw.
std::string recv_posted_then_cancelled(fixture& f, local_slice buffer) {
    std::stop_source stop;
    std::string what = "not cancelled";
    sync_wait([&]() -> task<void> {
        co_await f.el->schedule();
        auto posted = [&]() -> task<void> {
            try {
                (void)co_await f.server.recv(buffer, stop.get_token());
            } catch (const operation_cancelled& e) {
                what = e.what();
            }
        };
        auto cancel = [&]() -> task<void> {
            stop.request_stop();
            co_return;
        };
        // when_all starts its children in order, on this thread.
        co_await when_all(posted(), cancel());
    }());
    return what;
}

}  // namespace

TEST_CASE("a cancelled receive keeps its buffer until the next recv takes its message", "[operations]") {
    fixture f;
    std::size_t baseline = f.pool->bytes_in_use();
    {
        local_mr buffer = f.pool->allocate(256);
        CHECK_THAT(recv_posted_then_cancelled(f, buffer.all()), Catch::Contains("goes to the next recv"));
    }
    // The local_mr is gone; the posted receive still owns the memory.
    CHECK(f.pool->bytes_in_use() == baseline + 256);
    // The peer's send lands in the orphaned receive and is kept there...
    local_mr out = f.filled(256, 8);
    sync_wait(f.client.send(out.all()));
    CHECK(f.pool->bytes_in_use() == baseline + 512);
    // ...until the next recv takes it (copied), and the buffer goes.
    local_mr in = f.pool->allocate(256);
    auto r = sync_wait(f.server.recv(in.all()));
    CHECK(r.length == 256);
    CHECK(same_bytes(in.all(), out.all()));
    CHECK(f.pool->bytes_in_use() == baseline + 512);  // out and in
}

TEST_CASE("a recv cancelled after posting loses nothing: its message goes to the next recv, in order",
          "[operations]") {
    fixture f;
    local_mr first = f.pool->allocate(512);
    local_mr second = f.pool->allocate(512);
    local_mr third = f.pool->allocate(512);
    local_mr a = f.filled(100, 21), b = f.filled(300, 22), c = f.filled(50, 23);
    std::string what = recv_posted_then_cancelled(f, first.all());
    CHECK(what == "recv to client: cancelled after its receive was posted; the message that lands in it goes to "
                  "the next recv on this connection, in order: Operation canceled");

    SECTION("the message arrives before the next recv is made") {
        // Only the orphan is posted: the first message is kept in it.
        sync_wait(f.client.send_with_imm(a.all(), 7));
        auto r1 = sync_wait(f.server.recv(second.all()));
        CHECK(r1.length == 100);
        CHECK(r1.imm == std::optional<std::uint32_t>(7));
        CHECK(same_bytes(second.slice(0, 100), a.all()));
        auto [r2, sent] = sync_wait(when_all(f.server.recv(third.all()), f.client.send(b.all())));
        (void)sent;
        CHECK(r2.length == 300);
        CHECK_FALSE(r2.imm.has_value());
        CHECK(same_bytes(third.slice(0, 300), b.all()));
    }

    SECTION("the next recvs are waiting when the messages arrive") {
        auto [r1, r2, r3, s1, s2, s3] = sync_wait(when_all(
            f.server.recv(second.all()), f.server.recv(third.all()), f.server.recv_imm(), f.client.send(a.all()),
            f.client.send(b.all()), f.client.send_with_imm(c.slice(0, 0), 99)));
        (void)s1, (void)s2, (void)s3;
        CHECK(r1.length == 100);
        CHECK(same_bytes(second.slice(0, 100), a.all()));
        CHECK(r2.length == 300);
        CHECK(same_bytes(third.slice(0, 300), b.all()));
        CHECK(r3.length == 0);
        CHECK(r3.imm == std::optional<std::uint32_t>(99));
    }

    SECTION("a message that does not fit the next recv is reported, and the connection stays up") {
        sync_wait(f.client.send(b.all()));
        local_mr small = f.pool->allocate(64);
        CHECK_THROWS_MATCHES(sync_wait(f.server.recv(small.all())), std::system_error,
                             Catch::Predicate<std::system_error>([](const std::system_error& e) {
                                 return e.code() == std::errc::message_size &&
                                        std::string(e.what()).find("(300 bytes) arrived in the buffer of an earlier "
                                                                   "recv that was cancelled, and does not fit this "
                                                                   "recv's 64 bytes") != std::string::npos;
                             }));
        CHECK_FALSE(f.server.is_broken());
        auto [r, sent] = sync_wait(when_all(f.server.recv(second.all()), f.client.send(c.all())));
        (void)sent;
        CHECK(r.length == 50);
        CHECK(same_bytes(second.slice(0, 50), c.all()));
    }
}

TEST_CASE("steady-state operations allocate nothing", "[operations][allocation]") {
    fixture f;
    local_mr source = f.filled(64, 9);
    local_mr target = f.pool->allocate(64);
    local_mr in = f.pool->allocate(64);
    auto allocations = sync_wait([&]() -> task<std::uint64_t> {
        // The first await hops onto the event listener thread; from then on we run there.
        co_await f.client.write(source.all(), target.remote());
        REQUIRE(f.el->running_in_this_thread());
        // The connection's first atomic takes its result words (made on
        // first use, so connections that never do one pin none).
        (void)co_await f.client.fetch_add(target.remote(), 1);
        testing::allocation_counter counter;
        for (int i = 0; i < 1000; ++i) {
            co_await f.client.write(source.all(), target.remote());
            co_await f.client.read(in.all(), target.remote());
            (void)co_await f.client.fetch_add(target.remote(), 1);
        }
        co_return counter.all_threads().allocations;
    }());
    CHECK(allocations == 0);
}

namespace {

double cpu_ms_while_idle(std::chrono::milliseconds idle) {
    timespec before{}, after{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &before);
    std::this_thread::sleep_for(idle);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &after);
    return (after.tv_sec - before.tv_sec) * 1e3 + (after.tv_nsec - before.tv_nsec) / 1e6;
}

}  // namespace

TEST_CASE("the polling modes sleep as documented", "[operations][polling]") {
    auto sleeps_during = [](fixture& f, int writes) {
        local_mr source = f.filled(64, 10);
        local_mr target = f.pool->allocate(64);
        return sync_wait([&]() -> task<std::uint64_t> {
            co_await f.client.write(source.all(), target.remote());
            auto before = f.el->sleeps();
            for (int i = 0; i < writes; ++i)
                co_await f.client.write(source.all(), target.remote());
            co_return f.el->sleeps() - before;
        }());
    };
    SECTION("event mode sleeps whenever nothing is pending") {
        fixture f(polling_mode::event);
        (void)sleeps_during(f, 10);
        CHECK(cpu_ms_while_idle(std::chrono::milliseconds(300)) < 100);
    }
    SECTION("busy mode never sleeps, and spins while idle") {
        fixture f(polling_mode::busy);
        CHECK(sleeps_during(f, 100) == 0);
        CHECK(cpu_ms_while_idle(std::chrono::milliseconds(300)) > 150);
    }
    SECTION("adaptive mode spins while busy and sleeps once idle") {
        fixture f(polling_mode::adaptive);
        CHECK(sleeps_during(f, 100) <= 5);
        CHECK(cpu_ms_while_idle(std::chrono::milliseconds(300)) < 100);
    }
}

namespace {

// A bare coroutine that starts eagerly and is destroyed from outside while
// suspended: what happens to a task whose owner gives up on it.
struct eager_coroutine {
    struct promise_type {
        eager_coroutine get_return_object() { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_always final_suspend() noexcept { return {}; }
        void return_void() noexcept {}
        void unhandled_exception() noexcept { std::terminate(); }
    };
    std::coroutine_handle<promise_type> handle;
};

}  // namespace

TEST_CASE("a coroutine destroyed mid-receive leaves its buffer to the hardware, and its message to the next recv",
          "[operations]") {
    fixture f;
    std::size_t baseline = f.pool->bytes_in_use();
    std::promise<std::coroutine_handle<>> started;
    f.el->post([&] {
        auto c = [](fixture& fx) -> eager_coroutine {
            local_mr buffer = fx.pool->allocate(512);
            co_await fx.server.recv(buffer.all());
            FAIL("resumed after being destroyed");
        }(f);
        started.set_value(c.handle);
    });
    std::coroutine_handle<> handle = started.get_future().get();
    CHECK(f.pool->bytes_in_use() == baseline + 512);
    std::promise<void> destroyed;
    f.el->post([&] {
        handle.destroy();
        destroyed.set_value();
    });
    destroyed.get_future().get();
    // Frame gone, local_mr gone: the posted receive still owns the memory.
    CHECK(f.pool->bytes_in_use() == baseline + 512);
    local_mr out = f.filled(512, 11);
    local_mr in = f.pool->allocate(512);
    std::size_t with_out = f.pool->bytes_in_use();
    // The message lands in the abandoned receive and goes to the next recv;
    // then the abandoned buffer is freed.
    auto [r, sent] = sync_wait(when_all(f.server.recv(in.all()), f.client.send(out.all())));
    (void)sent;
    CHECK(r.length == 512);
    CHECK(same_bytes(in.all(), out.all()));
    CHECK(f.pool->bytes_in_use() == with_out - 512);
}
