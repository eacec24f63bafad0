// cordma::stream over rxe: byte-stream semantics (order and integrity with
// random read and write sizes, partial reads, end of stream, half close), a
// reader that sleeps while the writer keeps writing, a peer process killed
// mid-stream, and 64 streams to one server.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <system_error>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/metrics_endpoint.hpp>
#include <cordma/pending.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>
#include <cordma/when_all.hpp>

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"
#include "support/deadline.hpp"
#include "support/http_client.hpp"
#include "support/peer_process.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::test_builder;
using namespace std::chrono_literals;

namespace {

/// The stream's byte at position i: a pattern no chunking can fake.
std::byte expected_at(std::uint64_t i) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return std::byte(static_cast<unsigned char>(x ^ (i >> 12)));
}

void fill_from(std::span<std::byte> buffer, std::uint64_t at) {
    for (std::size_t k = 0; k < buffer.size(); ++k)
        buffer[k] = expected_at(at + k);
}

/// Writes `total` bytes of the pattern in random sizes (1 B to 2 MiB, a
/// third of them small), then closes.
task<void> write_pattern(stream s, std::uint64_t total, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::byte> buffer(2 << 20);
    std::uint64_t at = 0;
    while (at < total) {
        std::size_t n = rng() % 3 == 0 ? 1 + rng() % 512 : 1 + rng() % buffer.size();
        n = static_cast<std::size_t>(std::min<std::uint64_t>(n, total - at));
        fill_from(std::span(buffer).first(n), at);
        co_await s.write(std::span<const std::byte>(buffer.data(), n));
        at += n;
    }
    co_await s.close();
}

/// Reads until end of stream in random sizes; returns how many bytes came
/// and counts the ones that differ from the pattern.
task<std::uint64_t> read_pattern(stream s, unsigned seed, std::uint64_t* wrong) {
    std::mt19937_64 rng(seed);
    std::vector<std::byte> buffer(3 << 20);
    std::uint64_t at = 0;
    for (;;) {
        std::size_t want = rng() % 3 == 0 ? 1 + rng() % 700 : 1 + rng() % buffer.size();
        std::size_t n = co_await s.read(std::span(buffer).first(want));
        if (n == 0)
            break;
        for (std::size_t k = 0; k < n; ++k)
            if (buffer[k] != expected_at(at + k))
                ++*wrong;
        at += n;
    }
    co_await s.close();
    co_return at;
}

std::span<const std::byte> bytes_of(const std::string& s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

TEST_CASE("a stream carries every byte in order, whatever the read and write sizes", "[stream]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    // 256 MiB: about 500 writes and 400 reads of random sizes (1 B to 2 MiB,
    // a third of them under 1 KiB), every byte checked. A GiB took four
    // times as long (three minutes under ASan) and crossed no boundary
    // 256 MiB does not: offsets are 64-bit, the window wraps every few MiB.
    // Under ASan 64 MiB (the window still wraps a dozen times; the plain
    // build runs the 256): 40 s of CI time saved.
#if defined(__SANITIZE_ADDRESS__)
    const std::uint64_t total = std::uint64_t(64) << 20;
#else
    const std::uint64_t total = std::uint64_t(256) << 20;
#endif
    auto server = [](stream_listener& l, std::uint64_t* wrong) -> task<std::uint64_t> {
        stream s = co_await l.accept();
        std::uint64_t got = co_await read_pattern(std::move(s), 2, wrong);
        co_return got;
    };
    auto client = [](builder b, std::string address, std::uint64_t total) -> task<void> {
        stream s = co_await stream::connect(b, address);
        co_await write_pattern(std::move(s), total, 1);
    };
    std::uint64_t wrong = 0;
    auto start = std::chrono::steady_clock::now();
    auto [got, done] = sync_wait(when_all(server(l, &wrong), client(b, l.address(), total)));
    (void)done;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN("256 MiB through a stream in " << seconds << " s");
    CHECK(got == total);
    CHECK(wrong == 0);
    // Reads from register_size up went into one buffer: registered once
    // (or a few times, as the reads grew), found again after that.
    registration_cache_stats cache = b.registration_stats();
    INFO("hits " << cache.hits << ", misses " << cache.misses << ", not kept " << cache.not_kept);
    CHECK(cache.hits > 10 * cache.misses);
    CHECK(cache.not_kept == 0);
}

TEST_CASE("a stream's 64 B write and read, answered, allocate nothing in steady state", "[stream][allocation]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    constexpr int rounds = 1000;
    auto answer = [](stream s, int n) -> task<void> {
        std::array<std::byte, 64> buf{};
        for (int i = 0; i < n; ++i) {
            co_await s.read_exactly(buf);
            co_await s.write(buf);
        }
        co_await s.close();
    };
    double seconds = 0;
    auto ask = [](stream s, int n, double* seconds) -> task<std::uint64_t> {
        std::array<std::byte, 64> out{}, in{};
        std::uint64_t counted = 0;
        std::optional<testing::allocation_counter> counter;
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 100 + n; ++i) {  // 100 to warm up: caches, frames, credits
            if (i == 100) {
                counter.emplace();
                start = std::chrono::steady_clock::now();
            }
            fill_from(out, static_cast<std::uint64_t>(i));
            co_await s.write(out);
            co_await s.read_exactly(in);
            if (in != out)
                throw std::runtime_error("round trip " + std::to_string(i) + " came back wrong");
            if (i == 99 + n)
                counted = counter->all_threads().allocations;
        }
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        co_await s.close();
        co_return counted;
    };
    auto [server, client] = sync_wait(when_all(l.accept(), stream::connect(b, l.address())));
    auto [done, counted] = sync_wait(when_all(answer(std::move(server), 100 + rounds), ask(std::move(client), rounds, &seconds)));
    (void)done;
    // What is left over is driven by the clock (keepalives, timers): the
    // allowance grows with the time the rounds took, where one allocation
    // per round would be 1000 in a fraction of a second.
    double per_round = double(counted) / rounds;
    INFO(counted << " allocations in " << rounds << " rounds, " << seconds << " s");
    WARN("allocations per 64 B write + read, answered, both ends: " << per_round);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    CHECK(per_round < 40);  // frames are not cached under the sanitizers: 30 of them (2026-11-29)
#else
    CHECK(double(counted) < 0.05 * rounds + 20 * seconds);
#endif
}

TEST_CASE("reads may be partial; end of stream is 0; half close leaves the other way open", "[stream]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    auto server = [](stream_listener& l) -> task<std::vector<std::size_t>> {
        stream s = co_await l.accept();
        std::vector<std::size_t> sizes;
        std::vector<std::byte> small(10);
        std::string got;
        for (;;) {
            std::size_t n = co_await s.read(small);
            sizes.push_back(n);
            if (n == 0)
                break;
            got += text_of(std::span(small).first(n));
        }
        // The client half-closed: this side still writes, then closes.
        std::string reply = "got " + std::to_string(got.size()) + ": " + got.substr(0, 5);
        co_await s.write(bytes_of(reply));
        co_await s.close();
        co_return sizes;
    };
    auto client = [](builder b, std::string address) -> task<std::string> {
        stream s = co_await stream::connect(b, address);
        std::string text(95, 'x');
        text.replace(0, 5, "hello");
        co_await s.write(bytes_of(text));
        co_await s.shutdown_write();
        bool refused = false;
        try {
            co_await s.write(bytes_of(text));
        } catch (const std::logic_error&) {
            refused = true;
        }
        REQUIRE(refused);
        std::vector<std::byte> reply(64);
        std::string got;
        for (;;) {
            std::size_t n = co_await s.read(reply);
            if (n == 0)
                break;
            got += text_of(std::span(reply).first(n));
        }
        // End of stream stays end of stream.
        std::size_t again = co_await s.read(reply);
        REQUIRE(again == 0);
        co_await s.close();
        co_return got;
    };
    auto [sizes, reply] = sync_wait(when_all(server(l), client(b, l.address())));
    CHECK(reply == "got 95: hello");
    REQUIRE(sizes.size() == 11);
    for (std::size_t i = 0; i < 9; ++i)
        CHECK(sizes[i] == 10);
    CHECK(sizes[9] == 5);
    CHECK(sizes[10] == 0);
}

TEST_CASE("read_exactly fills the buffer or names how much the stream lacked", "[stream]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    auto server = [](stream_listener& l) -> task<std::string> {
        stream s = co_await l.accept();
        std::vector<std::byte> first(6);
        co_await s.read_exactly(first);
        std::vector<std::byte> rest(100);
        std::string error;
        try {
            co_await s.read_exactly(rest);
        } catch (const std::system_error& e) {
            error = e.what();
        }
        co_await s.close();
        co_return text_of(first) + "|" + error;
    };
    auto client = [](builder b, std::string address) -> task<void> {
        stream s = co_await stream::connect(b, address);
        co_await s.write(bytes_of("abc"));
        co_await s.write(bytes_of("defghi"));  // 9 bytes in all
        co_await s.close();
    };
    auto [got, done] = sync_wait(when_all(server(l), client(b, l.address())));
    (void)done;
    CHECK(got.substr(0, 7) == "abcdef|");
    CHECK(got.find("97 bytes short of 100") != std::string::npos);
}

TEST_CASE("a reader that sleeps makes the writer wait, with no error and bounded memory", "[stream]") {
    builder b = test_builder();
    builder client_b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    const std::uint64_t total = 64 << 20;
    std::atomic<std::uint64_t> written{0};
    auto server = [](stream_listener& l, std::atomic<std::uint64_t>* written, std::uint64_t total)
        -> task<std::pair<std::uint64_t, std::uint64_t>> {
        stream s = co_await l.accept();
        // Sleep (on a timer, not the thread) while the writer writes.
        co_await [](std::shared_ptr<event_listener> el) -> task<void> {
            struct sleeper {
                std::shared_ptr<event_listener> el;
                bool await_ready() { return false; }
                void await_suspend(std::coroutine_handle<> h) {
                    el->call_after(1s, [h] { h.resume(); });
                }
                void await_resume() {}
            };
            sleeper z{el};
            co_await z;
        }(s.connection().event_listener());
        std::uint64_t before = written->load();
        std::uint64_t wrong = 0;
        std::uint64_t got = co_await read_pattern(std::move(s), 5, &wrong);
        (void)total;
        co_return std::pair{before, wrong == 0 ? got : 0};
    };
    auto client = [](builder b, std::string address, std::atomic<std::uint64_t>* written, std::uint64_t total,
                     std::size_t* peak) -> task<void> {
        stream s = co_await stream::connect(b, address);
        std::vector<std::byte> block(8192);
        for (std::uint64_t at = 0; at < total; at += block.size()) {
            fill_from(block, at);
            co_await s.write(block);
            written->store(at + block.size());
            *peak = std::max(*peak, b.pool()->bytes_in_use());
        }
        co_await s.close();
    };
    std::size_t peak = 0;
    auto [seen, done] = sync_wait(when_all(server(l, &written, total), client(client_b, l.address(), &written, total, &peak)));
    (void)done;
    // While the reader slept the writer got at most a window of 8 KiB
    // writes (16 inline frames by default) and one batch (16 KiB) ahead,
    // and used no memory for it beyond the link's fixed slots.
    CHECK(seen.first <= 16 * 8192 + 16384);
    CHECK(seen.second == total);
    CHECK(peak < (8u << 20));
}

TEST_CASE("an idle stream pins a few KiB; its receives grow with traffic and shrink once it is idle", "[stream]") {
    builder server_b = test_builder();
    builder client_b = test_builder();
    stream_listener l = stream::serve(server_b, any_port());
    auto in_use = [&] { return std::pair{server_b.pool()->bytes_in_use(), client_b.pool()->bytes_in_use()}; };
    auto [server_before, client_before] = in_use();

    // Connect, then read what each side holds per connection while idle.
    auto pair = sync_wait(when_all(l.accept(), stream::connect(client_b, l.address())));
    stream server_s = std::get<0>(pair), client_s = std::get<1>(pair);
    auto [server_idle, client_idle] = in_use();
    INFO("idle: server " << server_idle - server_before << " B, client " << client_idle - client_before << " B");
    CHECK(server_idle - server_before <= 64 * 1024);
    CHECK(client_idle - client_before <= 64 * 1024);

    // 8 MiB in 64 KiB writes (copied, inline: 16 KiB frames), every byte
    // checked; a thread samples both pools meanwhile.
    auto transfer = [&](std::uint64_t total, unsigned seed) {
        std::atomic<bool> done{false};
        std::size_t server_peak = 0, client_peak = 0;
        std::thread sampler([&] {
            while (!done.load()) {
                auto [s, c] = in_use();
                server_peak = std::max(server_peak, s);
                client_peak = std::max(client_peak, c);
                std::this_thread::sleep_for(1ms);
            }
        });
        auto reader = [](stream s, std::uint64_t total, std::uint64_t* wrong) -> task<std::uint64_t> {
            std::vector<std::byte> buffer(1 << 20);
            std::uint64_t at = 0;
            while (at < total) {
                std::size_t n = co_await s.read(std::span(buffer).first(std::min<std::uint64_t>(buffer.size(), total - at)));
                REQUIRE(n > 0);
                for (std::size_t k = 0; k < n; ++k)
                    if (buffer[k] != expected_at(at + k))
                        ++*wrong;
                at += n;
            }
            co_return at;
        };
        auto writer = [](stream s, std::uint64_t total, unsigned seed) -> task<void> {
            (void)seed;
            std::vector<std::byte> block(64 * 1024);
            for (std::uint64_t at = 0; at < total; at += block.size()) {
                fill_from(block, at);
                co_await s.write(block);
            }
        };
        std::uint64_t wrong = 0;
        auto [got, none] = sync_wait(when_all(reader(server_s, total, &wrong), writer(client_s, total, seed)));
        (void)none;
        done = true;
        sampler.join();
        CHECK(got == total);
        CHECK(wrong == 0);
        return std::pair{server_peak, client_peak};
    };
    auto [server_peak, client_peak] = transfer(8 << 20, 1);
    // Grown: the reader's 36 receives of 16 KiB + 48 B, the writer's 20
    // send slots of the same.
    INFO("peak: server " << server_peak - server_before << " B, client " << client_peak - client_before << " B");
    CHECK(server_peak - server_before >= 36 * (16384 + 48));
    CHECK(client_peak - client_before >= 20 * (16384 + 48));

    // Idle: within a few seconds both sides are back to what they held
    // before the transfer (the writer shrinks after 1-2 s, its pads cycle
    // the reader's big receives out).
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (in_use() != std::pair{server_idle, client_idle} && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(50ms);
    auto [server_after, client_after] = in_use();
    INFO("after idle: server " << server_after - server_before << " B, client " << client_after - client_before << " B");
    CHECK(server_after == server_idle);
    CHECK(client_after == client_idle);

    // And it grows again for the next transfer.
    transfer(1 << 20, 2);
    sync_wait(when_all(server_s.close(), client_s.close()));
}

TEST_CASE("small writes made while the window is full go as one frame per batch", "[stream]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    // The process's stream counts (cordma_stream_*), before and after.
    metrics_endpoint endpoint("unix:@cordma-stream-test-" + std::to_string(getpid()));
    // (No cordma_stream_* series before the process's first stream: 0.)
    auto page_value = [&](const std::string& series, bool before = false) {
        std::string page = test::http_get_ok(endpoint.address(), "/metrics");
        std::size_t at = page.find("\n" + series + " ");
        if (before && at == std::string::npos)
            return 0.0;
        REQUIRE(at != std::string::npos);
        return std::stod(page.substr(at + series.size() + 2));
    };
    double frames_before = page_value("cordma_stream_frames_sent_total", true);
    double received_before = page_value("cordma_stream_frames_received_total", true);
    double stalls_before = page_value("cordma_stream_credit_stalls_total", true);
    double written_before = page_value("cordma_stream_bytes_written_total", true);
    constexpr std::uint64_t writes = 50'000;
    constexpr std::size_t size = 10;
    auto server = [](stream_listener& l, std::uint64_t* wrong) -> task<stream_statistics> {
        stream s = co_await l.accept();
        std::uint64_t got = co_await read_pattern(s, 7, wrong);
        stream_statistics seen = s.statistics();
        CHECK(seen.bytes_read == got);
        co_return seen;
    };
    auto client = [](builder b, std::string address) -> task<stream_statistics> {
        stream s = co_await stream::connect(b, address);
        std::array<std::byte, size> chunk;
        for (std::uint64_t i = 0; i < writes; ++i) {
            fill_from(chunk, i * size);
            co_await s.write(std::span<const std::byte>(chunk));
        }
        co_await s.close();  // sends the last batch, if one waits
        co_return s.statistics();
    };
    std::uint64_t wrong = 0;
    auto [read_side, write_side] = sync_wait(when_all(server(l, &wrong), client(b, l.address())));
    CHECK(wrong == 0);
    CHECK(read_side.bytes_read == writes * size);
    CHECK(write_side.bytes_written == writes * size);
    // One frame per write would be 50,000 frames. The writer runs ahead of
    // the reader on the one event listener thread, fills the window with
    // its first writes and batches the rest, 16 KiB (1,638 writes) a frame.
    WARN(writes << " writes of " << size << " B went as " << write_side.frames_sent << " frames");
    CHECK(write_side.frames_sent < writes / 100);
    // Every frame sent was taken in, one by one; the reader sent none.
    CHECK(read_side.frames_received == write_side.frames_sent);
    CHECK(read_side.frames_sent == 0);
    CHECK(write_side.frames_received == 0);
    // The writes that found the batch full waited for the reader's window.
    CHECK(write_side.credit_stalls >= 1);
    CHECK(write_side.credit_stalls <= write_side.frames_sent);
    CHECK(read_side.credit_stalls == 0);
    // The process's page: exactly these two streams' counts more.
    CHECK(page_value("cordma_stream_frames_sent_total") - frames_before == write_side.frames_sent);
    CHECK(page_value("cordma_stream_frames_received_total") - received_before == read_side.frames_received);
    CHECK(page_value("cordma_stream_credit_stalls_total") - stalls_before == write_side.credit_stalls);
    CHECK(page_value("cordma_stream_bytes_written_total") - written_before == writes * size);
}

namespace {
std::atomic<int> stream_spans_opened{0}, stream_spans_closed_ok{0}, stream_spans_other{0};
std::uint64_t count_open(void*, const span_info& s) {
    ++(s.kind == span_kind::stream_write && s.name == "stream write" && s.bytes == 10 ? stream_spans_opened
                                                                                        : stream_spans_other);
    return 0;
}
void count_close(void*, std::uint64_t, const span_info& s, const std::error_code& outcome) {
    ++(s.kind == span_kind::stream_write && !outcome ? stream_spans_closed_ok : stream_spans_other);
}
}  // namespace

TEST_CASE("a traced stream's frames carry the writer's trace id to the reader, one per frame, batches cut at a change",
          "[stream][trace]") {
    // 3 x 5,000 writes of 10 B: untraced, then under trace A, then B. The
    // writer outruns the reader (one event listener), so most go in
    // batches; a batch never mixes two traces. The reader reads them back
    // 10 B at a time and sees each write's trace.
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    const trace_id a = *trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736");
    const trace_id c = *trace_id::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    constexpr int per_phase = 5000;
    set_span_hook({&count_open, &count_close, nullptr});
    struct unhook {
        ~unhook() { set_span_hook({}); }
    } unhooking;
    auto server = [](stream_listener& l, trace_id a, trace_id c) -> task<std::vector<int>> {
        stream s = co_await l.accept();
        std::vector<int> wrong(3);  // reads whose trace was not their phase's, by phase
        std::array<std::byte, 10> chunk;
        for (int i = 0; i < 3 * per_phase; ++i) {
            co_await s.read_exactly(chunk);
            int phase = i / per_phase;
            trace_id want = phase == 0 ? trace_id{} : phase == 1 ? a : c;
            if (s.peer_trace() != want)
                ++wrong[static_cast<std::size_t>(phase)];
        }
        co_await s.close();
        co_return wrong;
    };
    auto client = [](builder b, std::string address, trace_id a, trace_id c) -> task<stream_statistics> {
        stream s = co_await stream::connect(b, address);
        std::array<std::byte, 10> chunk{};
        for (int i = 0; i < 3 * per_phase; ++i) {
            if (i == per_phase)
                s.set_trace(a);
            if (i == 2 * per_phase)
                s.set_trace(c);
            co_await s.write(std::span<const std::byte>(chunk));
        }
        CHECK(s.trace() == c);
        co_await s.close();
        co_return s.statistics();
    };
    auto [wrong, written] = sync_wait(when_all(server(l, a, c), client(b, l.address(), a, c)));
    CHECK(wrong == std::vector<int>{0, 0, 0});
    CHECK(written.frames_sent < 3 * per_phase / 10);  // batched, still
    CHECK(stream_spans_opened == 2 * per_phase);      // one per traced write, none for the rest
    CHECK(stream_spans_closed_ok == 2 * per_phase);
    CHECK(stream_spans_other == 0);
}

TEST_CASE("a peer process killed mid-stream fails the reader promptly", "[stream]") {
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    test::peer_process writer({"stream", l.address()});
    stream s = sync_wait(l.accept());
    std::vector<std::byte> buffer(1 << 20);
    std::uint64_t got = 0;
    while (got < (8u << 20)) {
        std::size_t n = sync_wait(s.read(buffer));
        REQUIRE(n > 0);
        for (std::size_t k = 0; k < n; ++k)
            REQUIRE(buffer[k] == std::byte{7});
        got += n;
    }
    writer.kill_now();
    auto killed = std::chrono::steady_clock::now();
    std::string error;
    try {
        for (;;) {
            std::size_t n = sync_wait(s.read(buffer));
            REQUIRE(n > 0);  // what arrived before the kill, then the error
        }
    } catch (const std::system_error& e) {
        error = e.what();
    }
    auto took = std::chrono::steady_clock::now() - killed;
    INFO(error);
    CHECK(took < 5s);
    CHECK(error.find(l.address().substr(0, l.address().rfind(':'))) != std::string::npos);
    bool write_failed = false;
    try {
        sync_wait(s.write(bytes_of("anyone?")));
    } catch (const std::system_error&) {
        write_failed = true;
    }
    CHECK(write_failed);
    sync_wait(s.close());
}

TEST_CASE("a writer stopped for 3 s (SIGSTOP) is a slow live peer, not a dead one: its stream goes on intact",
          "[stream]") {
    // A starved process is not a dead host: its device keeps acknowledging
    // (the RC retry limit, ~0.5 s, never runs), and the stream's keepalive
    // gives a silent peer 10 s. The reader waits in read() all the while.
    builder b = test_builder();
    stream_listener l = stream::serve(b, any_port());
    test::peer_process writer({"stream", l.address()});
    test::deadline limit(120s);
    stream s = sync_wait(l.accept(limit.token()));
    std::vector<std::byte> buffer(1 << 20);
    auto read_up_to = [&](std::uint64_t total, std::uint64_t got) {
        while (got < total) {
            std::size_t n = sync_wait(s.read(buffer));
            REQUIRE(n > 0);
            REQUIRE(std::all_of(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n),
                                [](std::byte x) { return x == std::byte{7}; }));
            got += n;
        }
        return got;
    };
    std::uint64_t got = read_up_to(4u << 20, 0);
    writer.stop();
    auto stopped = std::chrono::steady_clock::now();
    // Continued from another thread 3 s from now: the starvation itself is
    // the scenario, so here time passing is what is waited for.
    std::jthread waker([&writer](std::stop_token done) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        cv.wait_for(lock, done, 3s, [] { return false; });
        writer.resume();
    });
    got = read_up_to(got + (8u << 20), got);
    auto took = std::chrono::steady_clock::now() - stopped;
    CHECK(took >= 3s);  // the last bytes came after the writer was continued
    writer.kill_now();
}

TEST_CASE("64 streams to one server at once, each echoed intact", "[stream]") {
    builder b = test_builder();
    builder clients = test_builder();
    stream_listener l = stream::serve(b, any_port());
    constexpr int count = 64;
    auto echo = [](stream s) -> task<void> {
        std::vector<std::byte> buffer(100000);
        for (;;) {
            std::size_t n = co_await s.read(buffer);
            if (n == 0)
                break;
            co_await s.write(std::span<const std::byte>(buffer.data(), n));
        }
        co_await s.close();
    };
    // Every accept waits at once, as a server's accept loop that starts
    // each session as it comes; the deadline turns a lost client into a
    // failure instead of a hang.
    test::deadline limit(120s);
    auto session = [](stream_listener& l, decltype(echo) echo, std::stop_token token) -> task<void> {
        stream s = co_await l.accept(token);
        co_await echo(std::move(s));
    };
    auto server = [](stream_listener& l, decltype(session) session, decltype(echo) echo,
                     std::stop_token token) -> task<void> {
        std::vector<task<void>> sessions;
        for (int i = 0; i < count; ++i)
            sessions.push_back(session(l, echo, token));
        co_await when_all(std::move(sessions));
    };
    auto client = [](builder b, std::string address, int id) -> task<int> {
        stream s = co_await stream::connect(b, address);
        std::vector<std::byte> out(200000), in(200000);
        fill_from(out, static_cast<std::uint64_t>(id) * 1000003);
        auto reader = [](stream& s, std::vector<std::byte>& in) -> task<void> {
            co_await s.read_exactly(in);
        };
        auto writer = [](stream& s, std::vector<std::byte>& out) -> task<void> {
            co_await s.write(out);
            co_await s.shutdown_write();
        };
        co_await when_all(reader(s, in), writer(s, out));
        co_await s.close();
        co_return in == out ? 1 : 0;
    };
    std::vector<task<int>> all;
    for (int i = 0; i < count; ++i)
        all.push_back(client(clients, l.address(), i));
    auto [served, results] = sync_wait(when_all(server(l, session, echo, limit.token()), when_all(std::move(all))));
    (void)served;
    int intact = 0;
    for (int r : results)
        intact += r;
    CHECK(intact == count);
}

TEST_CASE("64 streams connect at once, and a slow accept() then serves every one", "[stream]") {
    // The server calls accept() only after every client has started to
    // connect, and then one at a time, 10 ms apart, as a server whose accept
    // loop is busy: no client may be refused or time out for it.
    builder b = test_builder();
    builder clients = test_builder();
    clients.connect_timeout(90s);  // 64 handshakes at once in an emulated VM, maybe under load
    test::deadline limit(150s);
    stream_listener l = stream::serve(b, any_port());
    constexpr int count = 64;
    constexpr std::size_t message = 16;
    auto client = [](builder b, std::string address, int id) -> task<int> {
        co_await b.event_listener()->schedule();  // every connect starts at once, on its event listener
        stream s = co_await stream::connect(b, address);
        std::vector<std::byte> out(message), in(message);
        fill_from(out, static_cast<std::uint64_t>(id) * 7919);
        co_await s.write(out);
        co_await s.read_exactly(in);
        co_await s.close();
        co_return in == out ? 1 : 0;
    };
    std::vector<pending<int>> running;
    for (int i = 0; i < count; ++i)
        running.push_back(start(client(clients, l.address(), i)));
    int echoed = 0;
    for (int i = 0; i < count; ++i) {
        std::this_thread::sleep_for(10ms);  // a slow accept() loop
        stream s = sync_wait(l.accept(limit.token()));
        std::vector<std::byte> buffer(message);
        sync_wait(s.read_exactly(buffer));
        sync_wait(s.write(buffer));
        sync_wait(s.close());
        ++echoed;
    }
    CHECK(echoed == count);
    int intact = 0;
    for (auto& r : running)
        intact += sync_wait(r.wait());
    CHECK(intact == count);
}

namespace {

/// Writes `total` bytes of the pattern in 4 KiB writes (inline frames), then
/// closes at once: the close disconnects while the reader still has a
/// window of frames and the end of stream to read. Closes after a failed
/// write too, so that the reader fails instead of waiting (a stream handle
/// dropped without close leaves its connection open).
task<void> write_then_close(stream_listener& l, std::uint64_t total, std::stop_token token) {
    stream s = co_await l.accept(token);
    std::vector<std::byte> block(4096);
    std::exception_ptr error;
    try {
        for (std::uint64_t at = 0; at < total; at += block.size()) {
            fill_from(block, at);
            co_await s.write(block);
        }
    } catch (...) {
        error = std::current_exception();
    }
    co_await s.close();
    if (error)
        std::rethrow_exception(error);
}

/// Reads to the end of the stream in 1 KiB reads (every 8 frames handled
/// send a credit, which finds the connection closed); 1 if every byte came
/// and then 0.
task<int> read_to_end(builder b, std::string address, std::uint64_t total) {
    stream s = co_await stream::connect(b, address);
    std::vector<std::byte> buffer(1024);
    std::uint64_t at = 0;
    bool intact = true;
    for (;;) {
        std::size_t n = co_await s.read(buffer);
        if (n == 0)
            break;
        for (std::size_t k = 0; k < n; ++k)
            intact = intact && buffer[k] == expected_at(at + k);
        at += n;
    }
    co_await s.close();
    co_return intact && at == total ? 1 : 0;
}

}  // namespace

TEST_CASE("a writer that closes at once loses its reader nothing, the end of stream included", "[stream]") {
    // A race seen in examples/stream. The writer's close disconnects as
    // soon as its last frames are delivered. The reader learns of the
    // disconnect (an rdma_cm event) possibly before it has taken those
    // frames from its completion queue, and its credits, sent as it reads
    // them, then fail at once. Neither may cost it a frame or turn the end
    // of stream into an error. (16 streams of small frames at once also
    // ran the writers out of send slots before they waited for one.)
    builder b = test_builder();
    builder clients = test_builder();
    stream_listener l = stream::serve(b, any_port());
    constexpr int count = 16;
    constexpr int rounds = 4;
    const std::uint64_t total = 512 * 1024;
    test::deadline limit(120s);
    int intact = 0;
    for (int round = 0; round < rounds; ++round) {
        std::vector<task<void>> writers;
        std::vector<task<int>> readers;
        for (int i = 0; i < count; ++i) {
            writers.push_back(write_then_close(l, total, limit.token()));
            readers.push_back(read_to_end(clients, l.address(), total));
        }
        auto [written, results] = sync_wait(when_all(when_all(std::move(writers)), when_all(std::move(readers))));
        (void)written;
        for (int r : results)
            intact += r;
    }
    CHECK(intact == count * rounds);
}
