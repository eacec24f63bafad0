// cordma_stream_stopped: one stopped client among many must not slow the
// others (issue 32: "a stream server with 256 clients, one of them stopped
// (SIGSTOP): the other 255 keep at least 90% of their throughput").
// bench/stream/stopped_run drives it.
//
// Usage:
//   cordma_stream_stopped serve ADDR:PORT --streams N [--chunk BYTES]
//       Accepts N streams and writes to each, on its own coroutine, chunks
//       of a counting pattern until the client's end of stream, then ends
//       its own. A client that stops
//       reading holds up only its own writer (its window fills). Prints
//       "listening on IP:PORT", and at the end how many streams ended
//       cleanly; exit 0 only if all N did.
//   cordma_stream_stopped read ADDR:PORT --streams K --seconds S [--chunk BYTES]
//       Opens K streams at once ("connected K streams in M ms"), then reads
//       each on its own coroutine for S seconds, checking every byte
//       against the pattern, and ends each cleanly (its end of stream, the
//       rest of the server's bytes until the server's end, close). Prints "second T bytes B" once
//       a second from then (B: bytes read by all K so far), so a driver can
//       take the rate over any window; exit 0 only if every stream opened,
//       every byte matched and no call failed.
//
// Every wait is bounded: connects by the builder's connect_timeout, reads
// and writes by the streams' peer_timeout (a peer silent 10 s is gone),
// and the whole run by --seconds plus 60 s (a watchdog exits 1 saying so).

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
    std::string mode, address;
    int streams = 0;
    int seconds = 20;
    std::size_t chunk = 64 * 1024;
};

/// The pattern's byte at stream offset `at`: readers check every byte.
std::byte pattern(std::uint64_t at) { return std::byte(static_cast<unsigned char>((at * 131) >> 3)); }

std::atomic<int> failures{0};

void fail(const std::string& what) {
    std::fprintf(stderr, "cordma_stream_stopped: %s\n", what.c_str());
    ++failures;
}

// ------------------------------------------------------------------ serve

std::atomic<int> ended_cleanly{0};

struct fed {
    stream s;
    bool ended = false;  // the client's end of stream arrived
};

/// Waits for the client's end of stream (it sends no bytes before it).
task<void> watch_end(fed* f) {
    std::byte one[1];
    try {
        if (co_await f->s.read(one) == 0)
            f->ended = true;
        else
            fail("stream from " + f->s.peer() + ": the client sent bytes; it only reads");
    } catch (const std::exception& e) {
        fail("stream from " + f->s.peer() + ": " + e.what());
    }
}

task<void> feed(stream s, std::size_t chunk) {
    fed f{std::move(s)};
    task_group end;
    end.spawn(watch_end(&f));
    std::vector<std::byte> bytes(chunk);
    std::uint64_t at = 0;
    std::string why;
    try {
        while (!f.ended) {
            for (std::size_t i = 0; i < chunk; ++i)
                bytes[i] = pattern(at + i);
            co_await f.s.write(bytes);
            at += chunk;
        }
    } catch (const std::exception& e) {
        why = e.what();
    }
    co_await end.join();
    if (f.ended && why.empty())
        ++ended_cleanly;
    else
        fail("stream to " + f.s.peer() + ": " + why);
    co_await f.s.close();
}

int serve(const options& o) {
    builder b;
    b.backlog(static_cast<std::size_t>(o.streams));
    stream_listener l = stream::serve(b, o.address);
    std::printf("listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    task_group feeders;
    sync_wait([&]() -> task<void> {
        for (int i = 0; i < o.streams; ++i)
            feeders.spawn(feed(co_await l.accept(), o.chunk));
        co_await feeders.join();
    }());
    std::printf("cordma_stream_stopped serve: %d of %d streams ended cleanly\n", ended_cleanly.load(), o.streams);
    return ended_cleanly == o.streams ? 0 : 1;
}

// ------------------------------------------------------------------- read

std::atomic<std::uint64_t> bytes_read{0};

task<void> open_one(builder b, std::string address, stream* into) {
    try {
        *into = co_await stream::connect(b, address);
    } catch (const std::exception& e) {
        fail(std::string("a connect failed: ") + e.what());
    }
}

task<void> drain(stream s, std::size_t chunk, clock_type::time_point until) {
    try {
        std::vector<std::byte> buffer(chunk);
        std::uint64_t at = 0;
        while (clock_type::now() < until) {
            std::size_t n = co_await s.read(buffer);
            if (n == 0)
                throw std::runtime_error("the server ended the stream early");
            for (std::size_t i = 0; i < n; ++i)
                if (buffer[i] != pattern(at + i))
                    throw std::runtime_error("byte " + std::to_string(at + i) + " differs from the pattern");
            at += n;
            bytes_read += n;
        }
        // A clean end both ways: this side's end of stream, then what the
        // server still writes (checked, not counted) until its end.
        co_await s.shutdown_write();
        for (;;) {
            std::size_t n = co_await s.read(buffer);
            if (n == 0)
                break;
            for (std::size_t i = 0; i < n; ++i)
                if (buffer[i] != pattern(at + i))
                    throw std::runtime_error("byte " + std::to_string(at + i) + " differs from the pattern");
            at += n;
        }
        co_await s.close();
    } catch (const std::exception& e) {
        fail("stream from " + s.peer() + ": " + e.what());
    }
}

int read(const options& o) {
    builder b;
    // Every stream opened first (at once), then the clock starts: the
    // rates below are of reading alone.
    std::vector<stream> streams(static_cast<std::size_t>(o.streams));
    auto opening = clock_type::now();
    sync_wait([&]() -> task<void> {
        task_group opens;
        for (auto& s : streams)
            opens.spawn(open_one(b, o.address, &s));
        co_await opens.join();
    }());
    if (failures > 0)
        return 1;
    auto began = clock_type::now();
    std::printf("connected %d streams in %.0f ms\n", o.streams,
                std::chrono::duration<double, std::milli>(began - opening).count());
    std::fflush(stdout);
    auto until = began + std::chrono::seconds(o.seconds);
    std::atomic<bool> done{false};
    std::thread reporter([&] {
        for (int t = 1; !done; ++t) {
            std::this_thread::sleep_until(began + std::chrono::seconds(t));  // the report's cadence
            std::printf("second %d bytes %llu\n", t, (unsigned long long)bytes_read.load());
            std::fflush(stdout);
            if (t > o.seconds + 60) {
                std::printf("cordma_stream_stopped read: still running %d s after its %d s: FAILED\n", t - o.seconds,
                            o.seconds);
                std::fflush(stdout);
                std::_Exit(1);
            }
        }
    });
    sync_wait([&]() -> task<void> {
        task_group readers;
        for (auto& s : streams)
            readers.spawn(drain(std::move(s), o.chunk, until));
        co_await readers.join();
    }());
    done = true;
    reporter.join();
    std::printf("cordma_stream_stopped read: %d streams, %llu bytes, %d failed\n", o.streams,
                (unsigned long long)bytes_read.load(), failures.load());
    return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    if (argc < 3) {
        std::fprintf(stderr, "usage: cordma_stream_stopped serve|read ADDR:PORT --streams N [--seconds S] [--chunk B]\n");
        return 2;
    }
    o.mode = argv[1];
    o.address = argv[2];
    for (int i = 3; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        long v = std::strtol(argv[i + 1], nullptr, 10);
        if (flag == "--streams") o.streams = static_cast<int>(v);
        else if (flag == "--seconds") o.seconds = static_cast<int>(v);
        else if (flag == "--chunk") o.chunk = static_cast<std::size_t>(v);
        else {
            std::fprintf(stderr, "cordma_stream_stopped: unknown option %s\n", flag.c_str());
            return 2;
        }
    }
    if (o.streams < 1) {
        std::fprintf(stderr, "cordma_stream_stopped: --streams must be at least 1\n");
        return 2;
    }
    try {
        return o.mode == "serve" ? serve(o) : o.mode == "read" ? read(o) : 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma_stream_stopped %s: %s\n", o.mode.c_str(), e.what());
        return 1;
    }
}
