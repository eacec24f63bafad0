// Cross-thread use of cordma over real rxe connections, written for
// ThreadSanitizer (it runs in the plain and ASan+UBSan builds too):
// operations awaited from several threads at once on connections whose two
// ends are served by two event listener threads; a coroutine hopping
// between those threads; event_listener::post and schedule from many
// threads; task_group members spawned from several threads; receives
// cancelled from another thread at any moment; an Asio thread pool
// awaiting cordma operations; the last handles dropped off the listener
// threads and on one. Every byte moved is checked and every wait is
// bounded. Worker threads never use Catch2's macros (Catch2 is not
// thread-safe): they record what they saw, and the test thread checks it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include <cordma/asio.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "support/deadline.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;

namespace {

// One connection whose ends belong to two builders, so each end is served
// by its own event listener thread: a coroutine that awaits both ends moves
// between the two threads, and operations from one listener's thread on
// the other's connection take the cross-thread path.
struct two_listeners {
    two_listeners() {
        // Senders on one thread run ahead of receivers on another: the
        // client waits for a posted receive as long as it takes instead of
        // failing after rnr_retry attempts.
        client_side.rnr_retry(7);
        // And a send that finds no receive posted retries after 0.64 ms,
        // not the default 655 ms.
        server_side.min_rnr_timer(12);
        client_side.min_rnr_timer(12);
        l = server_side.listen(test::test_address() + ":0");
        auto [s, c] = sync_wait(when_all(l->accept(), client_side.connect(l->address())));
        server = std::move(s);
        client = std::move(c);
    }

    builder server_side;
    builder client_side;
    std::optional<listener> l;
    connection server;
    connection client;
};

// Message `tag`: the tag in its first 4 bytes, then a pattern made from it.
std::size_t length_of(std::uint32_t tag) { return 4 + (tag * 37u) % 500u; }

std::byte pattern(std::uint32_t tag, std::size_t k) { return static_cast<std::byte>((k * 131 + tag * 7 + (tag >> 8)) & 0xff); }

local_slice fill(const local_mr& mr, std::uint32_t tag) {
    local_slice s = mr.slice(0, length_of(tag));
    std::memcpy(s.data(), &tag, 4);
    for (std::size_t k = 4; k < s.size(); ++k)
        s.data()[k] = pattern(tag, k);
    return s;
}

// The tag of the message in `bytes` (`length` of them), after checking
// every byte; ~0u if any is wrong.
std::uint32_t check(const std::byte* bytes, std::size_t length) {
    std::uint32_t tag = 0;
    if (length < 4)
        return ~0u;
    std::memcpy(&tag, bytes, 4);
    if (length != length_of(tag))
        return ~0u;
    for (std::size_t k = 4; k < length; ++k)
        if (bytes[k] != pattern(tag, k))
            return ~0u;
    return tag;
}

// Writes `from` to `to` and reads it back into `back`; with hop_first, from
// the event listener's thread (the direct path), else from the caller's
// (each operation hops to the listener and back).
task<void> write_then_read(connection c, local_slice from, local_slice back, remote_slice to, bool hop_first) {
    if (hop_first)
        co_await c.event_listener()->schedule();
    co_await c.write(from, to);
    co_await c.read(back, to);
}

// What a worker thread saw; checked by the test thread after joining it.
struct worker_report {
    int wrong = 0;  // messages or regions whose bytes were not the ones sent
    std::vector<std::uint32_t> tags;
    std::vector<std::uint64_t> old_values;
    std::string error;  // the first exception, if one escaped
};

void write_read_rounds(connection c, const local_mr* out, const local_mr* back, remote_slice target, remote_slice counter,
                       std::uint32_t thread, int rounds, worker_report* report) {
    try {
        for (int r = 0; r < rounds; ++r) {
            std::uint32_t tag = thread << 16 | static_cast<std::uint32_t>(r);
            local_slice from = fill(*out, tag);
            sync_wait(write_then_read(c, from, back->slice(0, from.size()), target.slice(0, from.size()), r % 2 == 1));
            if (check(back->data(), from.size()) != tag)
                ++report->wrong;
            if (r % 3 == 0)
                report->old_values.push_back(sync_wait(c.fetch_add(counter, 1)));
        }
    } catch (const std::exception& e) {
        report->error = e.what();
    }
}

std::string errors_of(const std::vector<worker_report>& reports) {
    std::string all;
    for (const auto& r : reports)
        if (!r.error.empty())
            all += r.error + "\n";
    return all;
}

}  // namespace

TEST_CASE("four threads await writes, reads and atomics on one connection at once", "[threads]") {
    two_listeners f;
    REQUIRE(f.client.event_listener() != f.server.event_listener());
    constexpr std::uint32_t threads = 4;
    constexpr int rounds = 60;
    auto client_pool = f.client_side.pool();
    local_mr target = f.server_side.pool()->allocate_zeroed(threads * 512);
    local_mr counter = f.server_side.pool()->allocate_zeroed(8);
    std::vector<local_mr> out, back;
    for (std::uint32_t t = 0; t < threads; ++t) {
        out.push_back(client_pool->allocate(512));
        back.push_back(client_pool->allocate(512));
    }
    std::vector<worker_report> reports(threads);
    {
        std::vector<std::jthread> workers;
        for (std::uint32_t t = 0; t < threads; ++t)
            workers.emplace_back(write_read_rounds, f.client, &out[t], &back[t], target.remote().slice(t * 512, 512),
                                 counter.remote(), t, rounds, &reports[t]);
    }
    INFO(errors_of(reports));
    std::vector<std::uint64_t> old_values;
    for (const auto& r : reports) {
        CHECK(r.error.empty());
        CHECK(r.wrong == 0);
        old_values.insert(old_values.end(), r.old_values.begin(), r.old_values.end());
    }
    // Every fetch_add saw a different value: together, 0..n-1.
    std::sort(old_values.begin(), old_values.end());
    for (std::size_t i = 0; i < old_values.size(); ++i)
        CHECK(old_values[i] == i);
    std::uint64_t final_count = 0;
    std::memcpy(&final_count, counter.data(), 8);
    CHECK(final_count == threads * ((rounds + 2) / 3));
    CHECK(old_values.size() == final_count);
}

namespace {

void send_rounds(connection c, const local_mr* out, std::uint32_t thread, int count, worker_report* report) {
    try {
        for (int i = 0; i < count; ++i) {
            std::uint32_t tag = thread << 16 | static_cast<std::uint32_t>(i);
            sync_wait(c.send(fill(*out, tag)));
            report->tags.push_back(tag);
        }
    } catch (const std::exception& e) {
        report->error = e.what();
    }
}

void receive_rounds(connection c, const local_mr* in, int count, std::stop_token stop, worker_report* report) {
    try {
        for (int i = 0; i < count; ++i) {
            recv_result r = sync_wait(c.recv(in->all(), stop));
            std::uint32_t tag = check(in->data(), r.length);
            if (tag == ~0u)
                ++report->wrong;
            report->tags.push_back(tag);
        }
    } catch (const std::exception& e) {
        report->error = e.what();
    }
}

}  // namespace

TEST_CASE("three sending threads meet two receiving threads: every message arrives once, whole", "[threads]") {
    two_listeners f;
    constexpr int senders = 3, receivers = 2, per_sender = 40;
    std::vector<local_mr> out, in;
    for (int t = 0; t < senders; ++t)
        out.push_back(f.client_side.pool()->allocate(512));
    for (int t = 0; t < receivers; ++t)
        in.push_back(f.server_side.pool()->allocate(512));
    std::vector<worker_report> sent(senders), got(receivers);
    {
        // A lost message would leave a receive waiting: the deadline ends it.
        test::deadline limit(120s);
        std::vector<std::jthread> workers;
        for (int t = 0; t < receivers; ++t)
            workers.emplace_back(receive_rounds, f.server, &in[t], senders * per_sender / receivers, limit.token(),
                                 &got[t]);
        for (int t = 0; t < senders; ++t)
            workers.emplace_back(send_rounds, f.client, &out[t], static_cast<std::uint32_t>(t), per_sender, &sent[t]);
    }
    INFO(errors_of(sent) << errors_of(got));
    std::vector<std::uint32_t> sent_tags, got_tags;
    for (const auto& r : sent) {
        CHECK(r.error.empty());
        sent_tags.insert(sent_tags.end(), r.tags.begin(), r.tags.end());
    }
    for (const auto& r : got) {
        CHECK(r.error.empty());
        CHECK(r.wrong == 0);
        got_tags.insert(got_tags.end(), r.tags.begin(), r.tags.end());
    }
    std::sort(sent_tags.begin(), sent_tags.end());
    std::sort(got_tags.begin(), got_tags.end());
    CHECK(sent_tags.size() == senders * per_sender);
    CHECK(got_tags == sent_tags);
}

TEST_CASE("a coroutine moves between two listeners' threads, each operation resuming on its own", "[threads]") {
    two_listeners f;
    auto client_thread = f.client.event_listener();
    auto server_thread = f.server.event_listener();
    auto client_pool = f.client_side.pool();
    auto server_pool = f.server_side.pool();
    local_mr out = client_pool->allocate(512), landed = client_pool->allocate(512), back = client_pool->allocate(512);
    local_mr in = server_pool->allocate(512), reply = server_pool->allocate(512);
    constexpr std::uint32_t rounds = 150;
    int wrong = 0, off_thread = 0;
    sync_wait([&]() -> task<void> {
        // From a listener's thread from the start: when both halves of a
        // when_all finish before it has suspended, it goes on inline on the
        // thread that started it, which in the first round would otherwise
        // be this test's main thread (seen once under TSan in a 1-CPU VM).
        co_await client_thread->schedule();
        for (std::uint32_t i = 0; i < rounds; ++i) {
            local_slice message = fill(out, i);
            std::size_t n = message.size();
            // The recv completes on the server's thread, the send on the
            // client's: this resumes on whichever finished last (or goes on
            // where it was, if both finished before it suspended).
            auto [r, sent] = co_await when_all(f.server.recv(in.all()), f.client.send(message));
            (void)sent;
            if (!client_thread->running_in_this_thread() && !server_thread->running_in_this_thread())
                ++off_thread;
            if (check(in.data(), r.length) != i)
                ++wrong;
            std::memcpy(reply.data(), in.data(), n);
            // From either thread: the server's write resumes on the server's.
            co_await f.server.write(reply.slice(0, n), landed.remote().slice(0, n));
            if (!server_thread->running_in_this_thread())
                ++off_thread;
            if (check(landed.data(), n) != i)
                ++wrong;
            // Then from the server's thread, the client's read (a hop).
            co_await f.client.read(back.slice(0, n), reply.remote().slice(0, n));
            if (!client_thread->running_in_this_thread())
                ++off_thread;
            if (check(back.data(), n) != i)
                ++wrong;
        }
    }());
    CHECK(wrong == 0);
    CHECK(off_thread == 0);
}

namespace {

task<bool> count_on_listener(std::shared_ptr<event_listener> listener, unsigned* counter) {
    co_await listener->schedule();
    ++*counter;  // listener thread only, like every engine structure
    co_return listener->running_in_this_thread();
}

}  // namespace

TEST_CASE("event_listener::post and schedule from many threads run everything once, in each thread's order", "[threads]") {
    auto listener = event_listener::start(test::open_test_device());
    constexpr unsigned threads = 4, posts = 3000, hops = 200;
    // Touched only on the listener thread, through what the threads post.
    std::vector<std::vector<unsigned>> seen(threads);
    bool always_on_listener = true;
    unsigned scheduled = 0;
    std::vector<unsigned> hops_off_listener(threads, 0);
    {
        std::vector<std::jthread> workers;
        for (unsigned t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                for (unsigned i = 0; i < posts; ++i) {
                    listener->post([&, t, i] {
                        seen[t].push_back(i);
                        always_on_listener = always_on_listener && listener->running_in_this_thread();
                    });
                    if (i % (posts / hops) == 0 && !sync_wait(count_on_listener(listener, &scheduled)))
                        ++hops_off_listener[t];
                }
            });
    }
    // Everything posted before this runs before it (one queue, in order).
    std::promise<void> drained;
    listener->post([&] { drained.set_value(); });
    REQUIRE(drained.get_future().wait_for(60s) == std::future_status::ready);
    CHECK(always_on_listener);
    CHECK(scheduled == threads * hops);
    for (unsigned t = 0; t < threads; ++t) {
        CHECK(hops_off_listener[t] == 0);
        REQUIRE(seen[t].size() == posts);
        for (unsigned i = 0; i < posts; ++i)
            if (seen[t][i] != i)
                FAIL("thread " << t << ": post " << seen[t][i] << " ran as number " << i);
    }
}

namespace {

task<void> group_member(connection c, local_slice from, local_slice back, remote_slice to, std::uint32_t tag, int* outcome) {
    for (std::size_t k = 0; k < from.size(); ++k)
        from.data()[k] = pattern(tag, k);
    co_await c.write(from, to);
    co_await c.read(back, to);
    *outcome = std::memcmp(from.data(), back.data(), from.size()) == 0 ? 1 : 2;
}

}  // namespace

TEST_CASE("task_group members spawned from four threads complete on the listeners and are joined once", "[threads]") {
    two_listeners f;
    constexpr std::size_t threads = 4, per_thread = 20, size = 256;
    constexpr std::size_t members = threads * per_thread;
    local_mr from = f.client_side.pool()->allocate(members * size);
    local_mr back = f.client_side.pool()->allocate(members * size);
    local_mr target = f.server_side.pool()->allocate_zeroed(members * size);
    std::vector<int> outcome(members, 0);  // each written by its member only
    task_group group;
    {
        std::vector<std::jthread> spawners;
        for (std::size_t t = 0; t < threads; ++t)
            spawners.emplace_back([&, t] {
                for (std::size_t j = 0; j < per_thread; ++j) {
                    std::size_t k = t * per_thread + j;
                    group.spawn(group_member(f.client, from.slice(k * size, size), back.slice(k * size, size),
                                             target.remote().slice(k * size, size), static_cast<std::uint32_t>(k),
                                             &outcome[k]));
                }
            });
    }
    sync_wait(group.join());
    CHECK(std::count(outcome.begin(), outcome.end(), 1) == static_cast<long>(members));
    CHECK(std::memcmp(target.data(), from.data(), members * size) == 0);
}

namespace {

enum class ending { none, message, cancelled };

// Receives `rounds` times, each with its own stop source (which another
// thread stops), announcing each round in `awaiting` before it awaits, and
// its end (however it ends) in `done`.
void cancelled_receives(connection c, const local_mr* in, std::vector<std::stop_source>* stops,
                        std::atomic<int>* awaiting, std::vector<ending>* endings, std::vector<std::uint32_t>* tags,
                        worker_report* report, std::atomic<bool>* done) {
    try {
        for (std::size_t i = 0; i < stops->size(); ++i) {
            awaiting->store(static_cast<int>(i), std::memory_order_release);
            try {
                recv_result r = sync_wait(c.recv(in->all(), (*stops)[i].get_token()));
                (*endings)[i] = ending::message;
                tags->push_back(check(in->data(), r.length));
            } catch (const operation_cancelled&) {
                (*endings)[i] = ending::cancelled;
            }
        }
    } catch (const std::exception& e) {
        report->error = e.what();
    }
    done->store(true, std::memory_order_release);
}

// Stops round i once the receiving thread has announced it, after a delay
// that varies from round to round (0 to 180 us), so that some stops land
// before the receive starts, some while it hops to the listener, and some
// while it waits posted.
void stop_each_round(std::vector<std::stop_source>* stops, const std::atomic<int>* awaiting,
                     const std::atomic<bool>* done) {
    auto give_up = std::chrono::steady_clock::now() + 120s;
    for (std::size_t i = 0; i < stops->size(); ++i) {
        while (awaiting->load(std::memory_order_acquire) < static_cast<int>(i)) {
            if (done->load() || std::chrono::steady_clock::now() > give_up)
                return;  // the receiving thread failed or is stuck: the test reports it
            std::this_thread::yield();
        }
        if (i % 10 != 0)
            std::this_thread::sleep_for(std::chrono::microseconds((i % 10) * 20));
        (*stops)[i].request_stop();
    }
}

// Waits, for at most 120 s, until the receiving thread is through its
// rounds. A stop that a receive missed leaves it waiting for a message
// that may never come: then sends messages (tags from 10000) until the
// thread is through, and returns the round that was stuck; -1 if none was.
int release_if_stuck(two_listeners& f, const local_mr& out, const std::atomic<bool>& done,
                     const std::atomic<int>& awaiting) {
    auto limit = std::chrono::steady_clock::now() + 120s;
    while (!done.load() && std::chrono::steady_clock::now() < limit)
        std::this_thread::sleep_for(10ms);
    if (done.load())
        return -1;
    int stuck = awaiting.load();
    test::deadline release_limit(60s);
    for (std::uint32_t tag = 10000; !done.load() && tag < 10100; ++tag)
        sync_wait(f.client.send(fill(out, tag), release_limit.token()));
    return stuck;
}

}  // namespace

TEST_CASE("receives stopped from another thread at any moment end, and lose nothing", "[threads]") {
    two_listeners f;
    constexpr int rounds = 200;
    local_mr in = f.server_side.pool()->allocate(512);
    local_mr out = f.client_side.pool()->allocate(512);
    std::vector<std::stop_source> stops(rounds);
    std::atomic<int> awaiting{-1};
    std::vector<ending> endings(rounds, ending::none);
    std::vector<std::uint32_t> tags;
    worker_report report;
    std::atomic<bool> done{false};

    SECTION("with nothing arriving, every receive ends cancelled") {
        std::jthread receiver(cancelled_receives, f.server, &in, &stops, &awaiting, &endings, &tags, &report, &done);
        std::jthread canceller(stop_each_round, &stops, &awaiting, &done);
        int stuck = release_if_stuck(f, out, done, awaiting);
        receiver.join();
        canceller.join();
        INFO(report.error);
        CHECK(report.error.empty());
        INFO("the receive of round " << stuck << " was stopped but never ended");
        CHECK(stuck == -1);
        CHECK(std::count(endings.begin(), endings.end(), ending::cancelled) == rounds);
        // The receives cancelled once posted stay posted; the next message
        // lands in one of them and goes to the next recv, whole.
        auto [r, sent] = sync_wait(when_all(f.server.recv(in.all()), f.client.send(fill(out, 4242))));
        (void)sent;
        CHECK(check(in.data(), r.length) == 4242);
    }

    SECTION("with messages arriving from a third thread, they all arrive, in order") {
        worker_report sender_report;
        // A send nobody receives retries forever (rnr_retry 7): bounded here.
        test::deadline limit(180s);
        std::jthread receiver(cancelled_receives, f.server, &in, &stops, &awaiting, &endings, &tags, &report, &done);
        std::jthread canceller(stop_each_round, &stops, &awaiting, &done);
        std::jthread sender([&] {
            try {
                for (std::uint32_t tag = 0; tag < rounds; ++tag)
                    sync_wait(f.client.send(fill(out, tag), limit.token()));
            } catch (const std::exception& e) {
                sender_report.error = e.what();
            }
        });
        int stuck = release_if_stuck(f, out, done, awaiting);
        receiver.join();
        canceller.join();
        INFO(report.error);
        REQUIRE(report.error.empty());
        INFO("the receive of round " << stuck << " was stopped but never ended");
        REQUIRE(stuck == -1);
        // What the cancelled receives did not take comes to the next ones.
        while (tags.size() < rounds) {
            recv_result r = sync_wait(f.server.recv(in.all(), limit.token()));
            tags.push_back(check(in.data(), r.length));
        }
        sender.join();
        INFO(sender_report.error);
        CHECK(sender_report.error.empty());
        INFO(std::count(endings.begin(), endings.end(), ending::cancelled) << " of " << rounds << " receives were cancelled");
        for (std::uint32_t i = 0; i < rounds; ++i)
            CHECK(tags[i] == i);
    }
}

TEST_CASE("coroutines on an Asio thread pool await cordma operations and resume on the pool", "[threads][asio]") {
    two_listeners f;
    constexpr std::size_t coroutines = 16, rounds = 5, size = 512;
    local_mr from = f.client_side.pool()->allocate(coroutines * size);
    local_mr back = f.client_side.pool()->allocate(coroutines * size);
    local_mr target = f.server_side.pool()->allocate_zeroed(coroutines * size);
    // Each slot is written by its own coroutine only, read after join().
    std::vector<int> wrong(coroutines, 0), off_pool(coroutines, 0), finished(coroutines, 0);
    std::vector<std::string> errors(coroutines);
    asio::thread_pool pool(3);
    for (std::size_t k = 0; k < coroutines; ++k)
        asio::co_spawn(
            pool,
            [&, k]() -> asio::awaitable<void> {
                for (std::size_t r = 0; r < rounds; ++r) {
                    std::uint32_t tag = static_cast<std::uint32_t>(k * rounds + r);
                    local_slice out = from.slice(k * size, size);
                    for (std::size_t i = 0; i < size; ++i)
                        out.data()[i] = pattern(tag, i);
                    co_await async_run(write_then_read(f.client, out, back.slice(k * size, size),
                                                       target.remote().slice(k * size, size), r % 2 == 0),
                                       asio::use_awaitable);
                    if (!pool.get_executor().running_in_this_thread())
                        ++off_pool[k];
                    if (std::memcmp(back.data() + k * size, out.data(), size) != 0)
                        ++wrong[k];
                }
                finished[k] = 1;
            },
            [&, k](std::exception_ptr error) {
                if (error) {
                    try {
                        std::rethrow_exception(error);
                    } catch (const std::exception& e) {
                        errors[k] = e.what();
                    }
                }
            });
    pool.join();
    for (std::size_t k = 0; k < coroutines; ++k) {
        INFO("coroutine " << k << ": " << errors[k]);
        CHECK(errors[k].empty());
        CHECK(finished[k] == 1);
        CHECK(wrong[k] == 0);
        CHECK(off_pool[k] == 0);
    }
}

namespace {

template <class... Weak>
bool all_expire(const Weak&... weak) {
    auto limit = std::chrono::steady_clock::now() + 10s;
    while (!(weak.expired() && ...)) {
        if (std::chrono::steady_clock::now() > limit)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// Takes the only handles to everything, writes once more and drops them
// all where it resumes: on the client's event listener thread. The outcome
// is atomic: the test thread sees it through no other synchronisation
// (it polls weak pointers, whose counts it reads relaxed).
task<void> last_write_then_drop(std::unique_ptr<two_listeners> f, std::shared_ptr<std::atomic<int>> outcome) {
    try {
        local_mr from = f->client_side.pool()->allocate(64);
        local_mr target = f->server_side.pool()->allocate_zeroed(64);
        std::memset(from.data(), 0x3c, 64);
        co_await f->client.write(from.all(), target.remote());
        bool right = f->client.event_listener()->running_in_this_thread() &&
                     std::to_integer<int>(target.data()[63]) == 0x3c;
        outcome->store(right ? 1 : 2, std::memory_order_release);
    } catch (const std::exception&) {
        outcome->store(3, std::memory_order_release);
    }
}

}  // namespace

TEST_CASE("the last handles go on another thread, or on a listener's own, and everything stops", "[threads]") {
    SECTION("on a thread of the user's") {
        auto f = std::make_unique<two_listeners>();
        std::weak_ptr<event_listener> server_listener = f->server.event_listener();
        std::weak_ptr<event_listener> client_listener = f->client.event_listener();
        std::string error;
        int wrong = 0;
        std::thread last([f = std::move(f), &error, &wrong]() mutable {
            try {
                local_mr from = f->client_side.pool()->allocate(64);
                local_mr target = f->server_side.pool()->allocate_zeroed(64);
                std::memset(from.data(), 0x5a, 64);
                sync_wait(f->client.write(from.all(), target.remote()));
                wrong = std::to_integer<int>(target.data()[0]) == 0x5a ? 0 : 1;
            } catch (const std::exception& e) {
                error = e.what();
            }
            f.reset();
        });
        last.join();
        CHECK(error.empty());
        CHECK(wrong == 0);
        CHECK(all_expire(server_listener, client_listener));
    }

    SECTION("on the client's event listener thread, inside the coroutine that held them") {
        auto f = std::make_unique<two_listeners>();
        std::weak_ptr<event_listener> server_listener = f->server.event_listener();
        std::weak_ptr<event_listener> client_listener = f->client.event_listener();
        auto outcome = std::make_shared<std::atomic<int>>(0);
        spawn_detached(last_write_then_drop(std::move(f), outcome));
        CHECK(all_expire(server_listener, client_listener));
        INFO("outcome 2: wrong bytes or thread, 3: an exception");
        CHECK(outcome->load(std::memory_order_acquire) == 1);
    }
}
