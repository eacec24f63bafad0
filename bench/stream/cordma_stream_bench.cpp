// cordma_stream_bench: rsocket's `rstream` custom test, done over
// cordma::stream, so bench/stream/run can put cordma beside rsocket and TCP
// with the same pattern, the same counts and the same output line.
//
// The pattern is rstream's (rdma-core librdmacm/examples/rstream.c, custom
// mode `-S size -C count -I iters`):
//   - the server (-b ADDR) listens and accepts one stream; the client
//     (-s ADDR) connects;
//   - a sync exchange: the client writes 16 bytes and reads 16 back, the
//     server the reverse (untimed);
//   - then, timed, `iters` times: the client writes `count` transfers of
//     `size` bytes and then reads `count` back; the server reads `count`
//     and then writes `count`.
//   So `-C 1 -I N` is a ping-pong (latency) and `-I 1 -C N` a one-way burst
//   each way (bandwidth).
// Both ends print rstream's line:
//   name bytes xfers iters total time Gb/sec usec/xfer
// with usec/xfer = elapsed / iters / (2 * count) (half a round trip in the
// latency test) and Gb/sec = iters * count * size * 2 * 8 / (1000 * usec).
//
// Like rstream, one buffer of `size` bytes (plain heap memory, as a socket
// program has: the stream copies or registers it as it does for any
// caller) serves every read and write, and nothing is checked unless asked
// (--verify, rstream's -T v). --registered writes from a local_slice of the
// builder's pool instead (no registration, and zero-copy from inline_size
// up): not what a socket program does, but what a cordma program can.
//
// The server prints "listening on ADDR:PORT" once it listens (the readiness
// line tools/lib/server-then-client waits for), then the header. Every wait
// is bounded: --timeout (default 120 s) stops the whole exchange, and the
// connect has the builder's connect_timeout.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;

namespace {

struct config {
    std::string server;  // -s: connect to it (client)
    std::string bind;    // -b: listen on it (server)
    std::string port = "7471";
    std::size_t size = 1000;  // rstream's defaults
    long count = 1000;
    long iters = 1;
    polling_mode polling = polling_mode::event;
    std::string device;
    stream_options options;
    bool registered = false;
    std::size_t registration_cache = connection_settings{}.registration_cache_size;
    bool verify = false;
    bool json = false;
    std::chrono::seconds timeout{120};
};

using cordma_bench::option_reader;
using cordma_bench::parse_polling;
using cordma_bench::usage_error;
using cordma_bench::parse_number;

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: cordma_stream_bench (-b BIND_ADDR | -s SERVER_ADDR) [options]\n"
                 "  -b ADDR             server: listen on ADDR\n"
                 "  -s ADDR             client: connect to ADDR\n"
                 "  -p PORT             port (default 7471; 0 on the server: any free one)\n"
                 "  -S SIZE             bytes per transfer (default 1000)\n"
                 "  -C COUNT            transfers each way per iteration (default 1000)\n"
                 "  -I ITERS            iterations (default 1)\n"
                 "  --polling MODE      event (default), busy, yielding or adaptive\n"
                 "  -d, --device NAME   RDMA device (default: the first with an active port)\n"
                 "  --inline-size B     stream_options::inline_size (default 16384)\n"
                 "  --window N          stream_options::window (default 16)\n"
                 "  --register-size B   stream_options::register_size (default 1048576)\n"
                 "  --registered        write from the builder's pool (a local_slice), not heap memory\n"
                 "  --registration-cache B  builder::registration_cache_size (default 256 MiB; 0: every\n"
                 "                      read from register_size up registers and deregisters its buffer)\n"
                 "  --verify            fill each transfer with a pattern and check it (rstream -T v)\n"
                 "  --json              also print one JSON line with the result\n"
                 "  --timeout S         bound on the whole run after connecting (default 120)\n"
                 "Pattern and output: rstream's custom test (see the top of cordma_stream_bench.cpp).\n");
}

config parse(int argc, char** argv) {
    config cfg;
    for (option_reader options(argc, argv, usage); options.next();) {
        std::string_view arg = options.arg(), name = options.name();
        auto value = [&] { return options.value(); };
        if (name == "-s") {
            cfg.server = std::string(value());
        } else if (name == "-b") {
            cfg.bind = std::string(value());
        } else if (name == "-p") {
            cfg.port = std::to_string(parse_number(name, value(), 0, 65535));
        } else if (name == "-S") {
            cfg.size = static_cast<std::size_t>(parse_number(name, value(), 1, 1L << 30));
        } else if (name == "-C") {
            cfg.count = parse_number(name, value(), 1, 1L << 30);
        } else if (name == "-I") {
            cfg.iters = parse_number(name, value(), 1, 1L << 30);
        } else if (name == "--polling") {
            cfg.polling = parse_polling(value(), "event, busy, yielding or adaptive");
        } else if (name == "-d" || name == "--device") {
            cfg.device = std::string(value());
        } else if (name == "--inline-size") {
            cfg.options.inline_size = static_cast<std::size_t>(parse_number(name, value(), 64, 1L << 20));
        } else if (name == "--window") {
            cfg.options.window = static_cast<std::uint32_t>(parse_number(name, value(), 2, 60));
        } else if (name == "--register-size") {
            cfg.options.register_size = static_cast<std::size_t>(parse_number(name, value(), 1, 1L << 30));
        } else if (name == "--registration-cache") {
            cfg.registration_cache = static_cast<std::size_t>(parse_number(name, value(), 0, 1L << 40));
        } else if (name == "--registered") {
            cfg.registered = true;
        } else if (name == "--verify") {
            cfg.verify = true;
        } else if (name == "--json") {
            cfg.json = true;
        } else if (name == "--timeout") {
            cfg.timeout = std::chrono::seconds(parse_number(name, value(), 1, 86400));
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }
    if (cfg.server.empty() == cfg.bind.empty())
        throw usage_error("give one of -s SERVER_ADDR (client) and -b BIND_ADDR (server)");
    if (!cfg.server.empty() && cfg.port == "0")
        throw usage_error("a client needs the server's port (-p)");
    return cfg;
}

double now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// rstream's size and count columns: 64, 1.5k, 64k, 1m; 1, 200, 1k.
std::string size_str(long long size) {
    long long base = 1;
    const char* mag = "";
    if (size >= (1LL << 30)) base = 1LL << 30, mag = "g";
    else if (size >= (1LL << 20)) base = 1LL << 20, mag = "m";
    else if (size >= (1LL << 10)) base = 1LL << 10, mag = "k";
    long long whole = size / base;
    long long tenth = whole < 10 ? (size % base) * 10 / base : 0;
    char out[32];
    if (tenth) std::snprintf(out, sizeof out, "%lld.%lld%s", whole, tenth, mag);
    else std::snprintf(out, sizeof out, "%lld%s", whole, mag);
    return out;
}

std::string count_str(long long n) {
    char out[32];
    if (n >= 1000000000) std::snprintf(out, sizeof out, "%lldb", n / 1000000000);
    else if (n >= 1000000) std::snprintf(out, sizeof out, "%lldm", n / 1000000);
    else if (n >= 1000) std::snprintf(out, sizeof out, "%lldk", n / 1000);
    else std::snprintf(out, sizeof out, "%lld", n);
    return out;
}

void print_header() {
    std::printf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec",
                "usec/xfer");
    std::fflush(stdout);
}

// The pattern of transfer `n` (counted over the whole run, both ways).
std::byte pattern(std::uint64_t n, std::size_t i) {
    return static_cast<std::byte>((n * 131 + i * 7 + (i >> 8)) & 0xff);
}

// One transfer each way is `size` bytes from (or into) the buffer's start.
task<double> run_test(stream s, config cfg, builder b, std::stop_token token) {
    const bool client = !cfg.server.empty();
    local_mr pooled;
    if (cfg.registered) pooled = b.pool()->allocate(std::max<std::size_t>(cfg.size, 16));
    std::vector<std::byte> heap;
    std::byte* data = nullptr;
    if (pooled) {
        data = pooled.data();
    } else {
        heap.resize(std::max<std::size_t>(cfg.size, 16));
        data = heap.data();
    }
    local_slice whole = pooled ? pooled.all() : local_slice{};
    std::span<std::byte> sync(data, 16);
    std::span<const std::byte> sync_out(data, 16);
    std::span<std::byte> in(data, cfg.size);
    std::span<const std::byte> out(data, cfg.size);
    local_slice out_registered = pooled ? whole.slice(0, cfg.size) : local_slice{};
    std::uint64_t sent = 0, received = 0;  // transfers, for --verify

    // rstream's sync_test: the client first.
    if (client) {
        co_await s.write(sync_out, token);
        co_await s.read_exactly(sync, token);
    } else {
        co_await s.read_exactly(sync, token);
        co_await s.write(sync_out, token);
    }

    double start = now_us();
    for (long i = 0; i < cfg.iters; ++i) {
        for (int half = 0; half < 2; ++half) {
            const bool sending = (half == 0) == client;
            for (long t = 0; t < cfg.count; ++t) {
                if (sending) {
                    if (cfg.verify) {
                        std::uint64_t n = sent * 2 + (client ? 0 : 1);
                        for (std::size_t b = 0; b < cfg.size; ++b) data[b] = pattern(n, b);
                    }
                    ++sent;
                    if (pooled)
                        co_await s.write(out_registered, token);
                    else
                        co_await s.write(out, token);
                } else {
                    co_await s.read_exactly(in, token);
                    if (cfg.verify) {
                        std::uint64_t n = received * 2 + (client ? 1 : 0);
                        for (std::size_t b = 0; b < cfg.size; ++b)
                            if (data[b] != pattern(n, b))
                                throw std::runtime_error("transfer " + std::to_string(received) + ", byte " +
                                                         std::to_string(b) + " is wrong");
                    }
                    ++received;
                }
            }
        }
    }
    double elapsed = now_us() - start;
    co_return elapsed;
}

const char* polling_name(polling_mode m) {
    switch (m) {
    case polling_mode::event: return "event";
    case polling_mode::busy: return "busy";
    case polling_mode::adaptive: return "adaptive";
    case polling_mode::yielding: return "yielding";
    }
    return "?";
}

// Everything from connecting to closing, on the event listener thread (its
// timer, the stop token's source, must be set there): connects or accepts,
// runs the test, closes; returns the timed microseconds.
task<double> session(builder b, config cfg, stream_listener* listening) {
    auto el = b.event_listener();
    co_await el->schedule();
    std::stop_source stop;
    auto deadline = el->call_after(cfg.timeout, [stop]() mutable { stop.request_stop(); });
    std::stop_token token = stop.get_token();
    stream s;
    if (listening) {
        s = co_await listening->accept(token);
    } else {
        std::string address = cfg.server + ":" + cfg.port;
        stream_options options = cfg.options;
        s = co_await stream::connect(b, address, options);
    }
    double usec = co_await run_test(s, cfg, b, token);
    co_await s.close();
    deadline->cancel();  // on the listener thread: every co_await above resumes there
    co_return usec;
}

}  // namespace

int main(int argc, char** argv) try {
    config cfg = parse(argc, argv);
    const bool client = !cfg.server.empty();

    builder b;
    b.polling(cfg.polling);
    b.registration_cache_size(cfg.registration_cache);
    if (!cfg.device.empty()) b.device(cfg.device);

    stream_listener l;
    if (!client) {
        l = stream::serve(b, cfg.bind + ":" + cfg.port, cfg.options);
        std::printf("listening on %s\n", l.address().c_str());
    }
    print_header();
    double usec = sync_wait(session(b, cfg, client ? nullptr : &l));
    if (!client) l.close();

    const double bytes = static_cast<double>(cfg.iters) * static_cast<double>(cfg.count) *
                         static_cast<double>(cfg.size) * 2;
    const double gbps = bytes * 8 / (1000 * usec);
    const double per_xfer = usec / static_cast<double>(cfg.iters) / static_cast<double>(cfg.count * 2);
    std::printf("%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", "custom", size_str(static_cast<long long>(cfg.size)).c_str(),
                count_str(cfg.count).c_str(), count_str(cfg.iters).c_str(),
                size_str(static_cast<long long>(bytes)).c_str(), usec / 1e6, gbps, per_xfer);
    if (cfg.json)
        std::printf("{\"impl\":\"cordma\",\"role\":\"%s\",\"polling\":\"%s\",\"bytes\":%zu,\"xfers\":%ld,"
                    "\"iters\":%ld,\"usec\":%.1f,\"gbps\":%.4f,\"usec_per_xfer\":%.3f,\"inline_size\":%zu,"
                    "\"window\":%u,\"register_size\":%zu,\"registered\":%s,\"registration_cache\":%zu,\"verified\":%s}\n",
                    client ? "client" : "server", polling_name(cfg.polling), cfg.size, cfg.count, cfg.iters, usec,
                    gbps, per_xfer, cfg.options.inline_size, static_cast<unsigned>(cfg.options.window),
                    cfg.options.register_size, cfg.registered ? "true" : "false", cfg.registration_cache, cfg.verify ? "true" : "false");
    std::fflush(stdout);
    return 0;
} catch (const usage_error& e) {
    std::fprintf(stderr, "cordma_stream_bench: %s\n", e.what());
    usage(stderr);
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "cordma_stream_bench: %s\n", e.what());
    return 1;
}
