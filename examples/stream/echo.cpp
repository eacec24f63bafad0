// stream_echo: an echo server for many clients at once, and a client that
// checks every byte it gets back, over RDMA with cordma::stream
// (docs/stream.md).
//
// Usage: stream_echo server ADDR:PORT [N]        (PORT 0: any free port)
//        stream_echo client ADDR:PORT ID [BYTES]
//
// The server echoes each client on a coroutine of its own, until the client
// ends its stream, then closes that stream. With N it accepts N clients,
// waits until they have all finished and exits: 0 if every one was echoed
// to the end, 1 if not. Once it listens it prints "server: listening on
// ADDR:PORT" (the port it got); examples/stream/run.sh starts its clients
// when that line comes.
//
// The client writes BYTES bytes (default 4 MiB) of a pseudo-random pattern
// seeded by its ID, in writes of random sizes from 1 B to 2 MiB, and reads
// the echo while it writes: a writer and a reader coroutine on the same
// stream, under when_all (a stream runs one read and one write at once).
// Then it ends its half of the stream (shutdown_write); the server's reads
// return 0, the server closes, and the client's reads return 0 once it has
// read everything. The client exits 0 if every byte came back, in order.
// The reader must run while the writer writes: the server writes each
// piece back before it reads the next, and a write waits once the reader
// has a window's worth unread (about 256 KiB by default). A client
// that read only after writing everything would wait for ever.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

using namespace cordma;

namespace {

// ---- The server ---------------------------------------------------------

/// How the clients fared. Only the event listener thread touches it: every
/// coroutine below resumes there.
struct tally {
    int finished = 0;
    int failed = 0;
};

/// Echoes one client until it ends its stream, then closes. Never throws: a
/// client's failure is counted and concerns no other client.
task<void> echo(stream s, tally& total) {
    std::string peer = s.peer();
    std::uint64_t echoed = 0;
    std::string error;
    try {
        std::vector<std::byte> buffer(256 * 1024);
        for (;;) {
            std::size_t n = co_await s.read(buffer);  // what has arrived, up to 256 KiB
            if (n == 0)
                break;  // the client's end of stream: it has written everything
            co_await s.write(std::span(buffer).first(n));
            echoed += n;
        }
    } catch (const std::exception& e) {
        error = e.what();
    }
    co_await s.close();  // after a failure too: a stream dropped unclosed keeps its connection
    ++total.finished;
    if (error.empty()) {
        std::printf("server: echoed %llu bytes to %s\n", static_cast<unsigned long long>(echoed), peer.c_str());
    } else {
        ++total.failed;
        std::printf("server: client %s failed after %llu bytes: %s\n", peer.c_str(),
                    static_cast<unsigned long long>(echoed), error.c_str());
    }
}

/// Accepts `clients` clients (0: for ever), each echoed by its own
/// coroutine, and returns once they have all finished.
task<tally> serve(stream_listener listener, int clients) {
    tally total;
    task_group sessions;
    for (int accepted = 0; clients == 0 || accepted < clients; ++accepted) {
        stream s;
        try {
            s = co_await listener.accept();
        } catch (const std::exception& e) {
            // Not a client's failure (accept refuses those and goes on
            // waiting): the listener itself broke.
            std::printf("server: accept failed: %s\n", e.what());
            ++total.failed;
            break;  // still join below: a task_group must be joined
        }
        std::printf("server: client %s connected\n", s.peer().c_str());
        sessions.spawn(echo(s, total));  // runs until its first wait, then the loop goes on
    }
    co_await sessions.join();
    listener.close();
    co_return total;
}

// ---- The client ---------------------------------------------------------

/// Byte `i` of client `id`'s stream: pseudo-random, seeded by the ID, and a
/// function of the position, so a byte lost, doubled or moved shows.
std::byte pattern(std::uint64_t id, std::uint64_t i) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + id * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return std::byte(static_cast<unsigned char>(x));
}

/// Writes `total` bytes of the pattern in random sizes, 1 B to 2 MiB (spread
/// evenly over the powers of two: the small writes are copied into the
/// server's receives, those from 1 MiB read by the server straight out of
/// `buffer`), then ends this half of the stream.
task<void> write_pattern(stream s, std::uint64_t id, std::uint64_t total) {
    std::mt19937_64 random(id);
    std::vector<std::byte> buffer(2 << 20);
    for (std::uint64_t at = 0; at < total;) {
        std::size_t n = 1 + random() % (std::size_t{1} << (random() % 22));
        n = static_cast<std::size_t>(std::min<std::uint64_t>(n, total - at));
        for (std::size_t k = 0; k < n; ++k)
            buffer[k] = pattern(id, at + k);
        co_await s.write(std::span(buffer).first(n));  // returns once `buffer` may be reused
        at += n;
    }
    co_await s.shutdown_write();  // the server reads 0, and closes its side
}

struct check {
    std::uint64_t received = 0;
    std::uint64_t wrong = 0;  // bytes that differ from the pattern
};

/// Reads the echo in random sizes until the end of the stream (the server
/// closed), checking every byte.
task<check> read_echo(stream s, std::uint64_t id) {
    std::mt19937_64 random(~id);
    std::vector<std::byte> buffer(1 << 20);
    check c;
    for (;;) {
        std::size_t want = 1 + random() % buffer.size();
        std::size_t n = co_await s.read(std::span(buffer).first(want));
        if (n == 0)
            co_return c;  // end of stream
        for (std::size_t k = 0; k < n; ++k)
            if (buffer[k] != pattern(id, c.received + k))
                ++c.wrong;
        c.received += n;
    }
}

task<bool> client(builder b, std::string address, std::uint64_t id, std::uint64_t total) {
    stream s = co_await stream::connect(b, address);
    auto [written, echoed] = co_await when_all(write_pattern(s, id, total), read_echo(s, id));
    (void)written;
    co_await s.close();
    std::printf("client %llu: wrote %llu bytes, read back %llu, %llu of them wrong\n",
                static_cast<unsigned long long>(id), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(echoed.received), static_cast<unsigned long long>(echoed.wrong));
    co_return echoed.received == total && echoed.wrong == 0;
}

// ---- The command line ---------------------------------------------------

struct usage_error : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

std::uint64_t number(const char* text, std::uint64_t low, std::uint64_t high, const char* what) {
    std::string_view s = text;
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < low || value > high)
        throw usage_error(std::string(what) + " must be a number in " + std::to_string(low) + ".." +
                          std::to_string(high) + ", not '" + std::string(s) + "'");
    return value;
}

int server_main(const char* address, int clients) {
    builder b;  // the first RDMA device with an active port, default settings
    stream_listener listener = stream::serve(b, address);
    std::printf("server: listening on %s\n", listener.address().c_str());
    tally total = sync_wait(serve(listener, clients));
    std::printf("server: %d client(s) finished, %d failed\n", total.finished, total.failed);
    return total.failed == 0 ? 0 : 1;
}

int client_main(const char* address, std::uint64_t id, std::uint64_t bytes) {
    builder b;
    return sync_wait(client(b, address, id, bytes)) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe (run.sh reads it)
    std::string_view mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "server" && (argc == 3 || argc == 4)) {
            int clients = argc == 4 ? static_cast<int>(number(argv[3], 1, 1'000'000, "N")) : 0;
            return server_main(argv[2], clients);
        }
        if (mode == "client" && (argc == 4 || argc == 5)) {
            std::uint64_t id = number(argv[3], 0, UINT64_MAX, "ID");
            std::uint64_t bytes = argc == 5 ? number(argv[4], 0, std::uint64_t{1} << 40, "BYTES") : 4 << 20;
            return client_main(argv[2], id, bytes);
        }
        throw usage_error("a mode, server or client, and its arguments");
    } catch (const usage_error& e) {
        std::fprintf(stderr, "stream_echo: %s\n"
                             "usage: stream_echo server ADDR:PORT [N]          (PORT 0: any free port; exit after N clients)\n"
                             "       stream_echo client ADDR:PORT ID [BYTES]   (BYTES default 4 MiB)\n",
                     e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stream_echo %s: %s\n", argv[1], e.what());
        return 1;
    }
}
