// cordma::blocking_stream over rxe: the socket-shaped face of stream, called
// from plain threads. A short read (18 bytes into a 40-byte buffer),
// read_exactly and the string overloads, end of stream, timeouts that fire
// and lose nothing, std::logic_error on the event listener thread, and no
// warning when a peer that ended its stream cleanly goes first.
//
// Each side runs on its own thread (std::async); Catch2's assertions stay on
// the test's thread (Catch2 2 is not thread-safe), on what the futures
// return. Every blocking call is bounded by a timeout, so a hang fails.

#include <chrono>
#include <future>
#include <mutex>
#include <span>
#include <stop_token>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/blocking_stream.hpp>
#include <cordma/builder.hpp>
#include <cordma/error.hpp>
#include <cordma/log.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;
using test::any_port;
using test::test_builder;
using namespace std::chrono_literals;

namespace {

/// A client and the server's side of it, both with a 30 s limit per call.
struct pair_of_streams {
    blocking_stream server;
    blocking_stream client;
};

pair_of_streams connect_pair(builder b, blocking_stream_listener& l) {
    auto accepted = std::async(std::launch::async, [&l] { return l.accept(30s); });
    pair_of_streams p;
    p.client = blocking_stream::connect(b, l.address(), {}, 30s);
    p.server = accepted.get();
    p.client.set_timeout(30s);
    p.server.set_timeout(30s);
    return p;
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace

TEST_CASE("an 18-byte write read into a 40-byte buffer is a short read of 18, then the reply, then 0",
          "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    constexpr std::string_view request = "Hello from client!";
    constexpr std::string_view reply = "Hello from server! Got your 18 bytes.";
    REQUIRE(request.size() == 18);

    struct seen {
        std::size_t n = 0;
        std::string bytes;
    };
    auto server = std::async(std::launch::async, [&] {
        blocking_stream s = l.accept(30s);
        s.set_timeout(30s);
        char buffer[40];
        seen got;
        got.n = s.read(buffer, sizeof buffer);
        got.bytes.assign(buffer, got.n);
        s.write(reply);
        s.close();
        return got;
    });
    blocking_stream c = blocking_stream::connect(b, l.address(), {}, 30s);
    c.set_timeout(30s);
    c.write(request.data(), request.size());
    std::string answer = "prefix:";
    std::size_t total = 0;
    while (answer.size() < 7 + reply.size()) {
        std::size_t n = c.read(answer, 64);  // appends
        REQUIRE(n > 0);
        total += n;
    }
    char rest[16];
    std::size_t end = c.read(std::span<char>(rest));
    std::size_t again = c.read(rest, sizeof rest);
    c.close();
    seen got = server.get();

    CHECK(got.n == 18);
    CHECK(got.bytes == request);
    CHECK(total == reply.size());
    CHECK(answer == "prefix:" + std::string(reply));
    CHECK(end == 0);
    CHECK(again == 0);
    CHECK(c.async().statistics().bytes_read == reply.size());
}

TEST_CASE("read_exactly gathers the pieces; the string overloads append; a short stream names what it lacked",
          "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    pair_of_streams p = connect_pair(b, l);
    p.client.write("abc");
    p.client.write(std::string_view("defghi"));  // 9 bytes in all, in two writes
    p.client.close();

    std::vector<char> six(6);
    p.server.read_exactly(std::span<char>(six));
    std::string text = "x";
    p.server.read_exactly(text, 3);
    std::string before_end = text;
    std::string error;
    std::error_code code;
    try {
        p.server.read_exactly(text, 5);
    } catch (const std::system_error& e) {
        error = e.what();
        code = e.code();
    }
    char one;
    std::size_t after = p.server.read(&one, 1);
    p.server.close();

    CHECK(std::string(six.begin(), six.end()) == "abcdef");
    CHECK(before_end == "xghi");
    CHECK(text == "xghi");  // nothing came before the end
    CHECK(code == std::errc::no_message_available);
    CHECK(contains(error, "5 bytes short of 5"));
    CHECK(contains(error, "stream"));
    CHECK(after == 0);
}

TEST_CASE("a read or read_exactly that times out loses nothing: the next read gets the bytes",
          "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    pair_of_streams p = connect_pair(b, l);

    // Nothing written: the read runs out of time.
    p.server.set_timeout(200ms);
    char buffer[10];
    std::string read_error;
    std::error_code read_code;
    auto started = std::chrono::steady_clock::now();
    try {
        (void)p.server.read(buffer, sizeof buffer);
    } catch (const std::system_error& e) {
        read_error = e.what();
        read_code = e.code();
    }
    auto waited = std::chrono::steady_clock::now() - started;

    // The coroutine underneath, cancelled: the error speaks of the stream
    // (not of the link it runs on), and loses nothing either.
    std::stop_source stop;
    stop.request_stop();
    std::string cancelled;
    try {
        (void)sync_wait(p.server.async().read(std::as_writable_bytes(std::span(buffer)), stop.get_token()));
    } catch (const operation_cancelled& e) {
        cancelled = e.what();
    }

    // What comes afterwards goes to the next read.
    p.client.write("late");
    p.server.set_timeout(30s);
    std::size_t n = p.server.read(buffer, sizeof buffer);
    std::string late(buffer, n);

    // read_exactly: 3 of 10 bytes come in time, they stay in the buffer,
    // and the other 7 go to the next call.
    p.client.write("123");
    p.server.set_timeout(300ms);
    std::string exact_error;
    try {
        p.server.read_exactly(buffer, 10);
    } catch (const timed_out_error& e) {
        exact_error = e.what();
    }
    std::string first_three(buffer, 3);
    p.client.write("4567890");
    p.server.set_timeout(30s);
    p.server.read_exactly(buffer, 7);
    std::string last_seven(buffer, 7);

    // The string form keeps what came before the limit too.
    p.client.write("ab");
    p.server.set_timeout(300ms);
    std::string appended = ">";
    bool string_timed_out = false;
    try {
        p.server.read_exactly(appended, 4);
    } catch (const timed_out_error&) {
        string_timed_out = true;
    }
    p.client.close();
    p.server.set_timeout(30s);
    std::size_t end = p.server.read(buffer, sizeof buffer);
    p.server.close();

    CHECK(read_code == std::errc::timed_out);
    CHECK(contains(read_error, "cordma::blocking_stream::read"));
    CHECK(contains(read_error, p.server.peer()));
    CHECK(contains(read_error, "200 ms"));
    CHECK(waited >= 200ms);
    CHECK(waited < 10s);
    CHECK(contains(cancelled, "cordma::stream::read to " + p.server.peer()));
    CHECK(!contains(cancelled, "group"));
    CHECK(late == "late");
    CHECK(contains(exact_error, "3 of 10 bytes came within 300 ms"));
    CHECK(first_three == "123");
    CHECK(last_seven == "4567890");
    CHECK(string_timed_out);
    CHECK(appended == ">ab");
    CHECK(end == 0);
}

TEST_CASE("accept times out naming the listener, and keeps a later client for the next accept",
          "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    std::string error;
    try {
        (void)l.accept(100ms);
    } catch (const timed_out_error& e) {
        error = e.what();
    }
    blocking_stream c = blocking_stream::connect(b, l.address(), {}, 30s);
    c.set_timeout(30s);
    c.write("ping");
    blocking_stream s = l.accept(30s);
    s.set_timeout(30s);
    std::string got;
    s.read_exactly(got, 4);
    c.close();
    s.close();

    CHECK(contains(error, "cordma::blocking_stream_listener::accept"));
    CHECK(contains(error, l.address()));
    CHECK(contains(error, "100 ms"));
    CHECK(got == "ping");
}

TEST_CASE("blocking calls on the event listener thread throw std::logic_error instead of waiting forever",
          "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    pair_of_streams p = connect_pair(b, l);
    auto on_listener = [](builder b, blocking_stream s, blocking_stream_listener l) -> task<std::vector<std::string>> {
        co_await b.event_listener()->schedule();
        std::vector<std::string> refusals;
        auto attempt = [&refusals](auto call) {
            try {
                call();
                refusals.push_back("returned");
            } catch (const std::logic_error& e) {
                refusals.push_back(e.what());
            } catch (const std::exception& e) {
                refusals.push_back(std::string("other: ") + e.what());
            }
        };
        char c;
        attempt([&] { (void)s.read(&c, 1); });
        attempt([&] { s.read_exactly(&c, 1); });
        attempt([&] { s.write("x"); });
        attempt([&] { s.shutdown_write(); });
        attempt([&] { s.close(); });
        attempt([&] { (void)l.accept(1s); });
        attempt([&] { (void)blocking_stream::connect(b, l.address()); });
        co_return refusals;
    };
    std::vector<std::string> refusals = sync_wait(on_listener(b, p.client, l));
    // Nothing was refused by accident: the streams still work from here.
    p.client.write("ok");
    std::string got;
    p.server.read_exactly(got, 2);
    p.client.close();
    p.server.close();

    REQUIRE(refusals.size() == 7);
    for (const std::string& r : refusals)
        CHECK(contains(r, "on the event listener thread would wait for itself"));
    CHECK(got == "ok");
}

TEST_CASE("a reader that closes after its peer ended the stream and left logs no warning", "[blocking_stream]") {
    std::mutex m;
    std::vector<std::string> warnings;
    set_log_sink([&](log_level level, std::string_view line) {
        if (level >= log_level::warning) {
            std::lock_guard lock(m);
            warnings.emplace_back(line);
        }
    });
    struct restore_sink {
        ~restore_sink() { set_log_sink({}); }
    } restore;
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    int rounds_clean = 0;
    for (int round = 0; round < 4; ++round) {
        pair_of_streams p = connect_pair(b, l);
        p.server.write("reply");
        p.server.close();  // the end of stream, then the connection goes
        std::string got;
        while (p.client.read(got, 64) > 0) {
        }
        // Let the disconnect reach the reader before it closes (bounded):
        // its close then finds the peer gone.
        auto until = std::chrono::steady_clock::now() + 10s;
        while (!p.client.async().connection().is_broken() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(1ms);
        p.client.close();
        if (got == "reply")
            ++rounds_clean;
    }
    set_log_sink({});

    CHECK(rounds_clean == 4);
    for (const std::string& w : warnings)
        CHECK(w == "(no warning expected)");
    CHECK(warnings.empty());
}

TEST_CASE("a write that times out has sent part of its buffer, in order, and says so", "[blocking_stream]") {
    builder b = test_builder();
    blocking_stream_listener l = blocking_stream::serve(b, any_port());
    pair_of_streams p = connect_pair(b, l);
    // Below register_size (1 MiB), so copied: a window of frames (16 of
    // 16 KiB) and one batch go without the reader, then the write waits for
    // room that never comes while the server does not read.
    std::string pattern(1000 * 1000, '\0');
    for (std::size_t i = 0; i < pattern.size(); ++i)
        pattern[i] = static_cast<char>('a' + (i * 7 + i / 977) % 26);
    p.client.set_timeout(300ms);
    std::string error;
    try {
        p.client.write(pattern);
    } catch (const timed_out_error& e) {
        error = e.what();
    }
    // What went reaches the reader, in order, and then nothing more.
    p.server.set_timeout(500ms);
    std::string got;
    bool drained = false;
    try {
        while (p.server.read(got, 64 * 1024) > 0) {
        }
    } catch (const timed_out_error&) {
        drained = true;
    }
    p.server.close();
    p.client.close();

    CHECK(contains(error, "cordma::blocking_stream::write to " + p.client.peer()));
    CHECK(contains(error, "300 ms"));
    CHECK(drained);
    CHECK(got.size() > 0);
    CHECK(got.size() < pattern.size());
    CHECK(got == pattern.substr(0, got.size()));
}
