// One end of a cordma::stream between two hosts (tests/hosts/stream_hosts.sh):
//
//   stream_peer serve ADDR:PORT BYTES     accept one stream
//   stream_peer connect ADDR:PORT BYTES   connect to it (retrying for up to
//                                         60 s while nothing listens yet:
//                                         the other host may still be booting)
//
// Both ends then write BYTES of a pattern seeded by their role, in writes of
// random sizes (1 B to 4 MiB, log-uniform, so both the copied frames and
// the zero-copy reads run), while reading the other end's BYTES in reads
// of random sizes, and check every byte. Then shutdown_write, a read that
// must return 0, and close. Exit 0 only if every byte matched and no call
// failed; the whole run has a deadline (600 s) and every read and write is
// bounded by it. Prints the bytes each way and the rate.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

/// The pattern's byte at `offset` of the stream written by `role`.
std::byte pattern(std::uint64_t role, std::uint64_t offset) {
    std::uint64_t x = (offset >> 3) * 0x9e3779b97f4a7c15ull ^ (role + 1) * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return std::byte(x >> (8 * (offset & 7)));
}

std::size_t random_size(std::mt19937_64& rng, std::size_t largest) {
    std::uniform_real_distribution<double> exponent(0.0, std::log2(double(largest)));
    return std::max<std::size_t>(1, std::size_t(std::exp2(exponent(rng))));
}

task<void> writer(stream& s, std::uint64_t role, std::uint64_t total, std::stop_token token) {
    std::mt19937_64 rng(role * 7 + 1);
    std::vector<std::byte> buffer(4 << 20);
    std::uint64_t offset = 0;
    while (offset < total) {
        std::size_t n = std::min<std::uint64_t>(random_size(rng, buffer.size()), total - offset);
        for (std::size_t i = 0; i < n; ++i)
            buffer[i] = pattern(role, offset + i);
        std::span<const std::byte> bytes(buffer.data(), n);
        co_await s.write(bytes, token);
        offset += n;
    }
    co_await s.shutdown_write();
}

task<void> reader(stream& s, std::uint64_t role, std::uint64_t total, std::stop_token token) {
    std::uint64_t theirs = 1 - role;
    std::mt19937_64 rng(role * 7 + 2);
    std::vector<std::byte> buffer(4 << 20);
    std::uint64_t offset = 0;
    while (offset < total) {
        std::span<std::byte> into(buffer.data(), random_size(rng, buffer.size()));
        std::size_t n = co_await s.read(into, token);
        if (n == 0)
            throw std::runtime_error("the stream ended after " + std::to_string(offset) + " of " +
                                     std::to_string(total) + " bytes");
        for (std::size_t i = 0; i < n; ++i)
            if (buffer[i] != pattern(theirs, offset + i))
                throw std::runtime_error("byte " + std::to_string(offset + i) + " is wrong: " +
                                         std::to_string(int(buffer[i])) + ", not " +
                                         std::to_string(int(pattern(theirs, offset + i))));
        offset += n;
    }
    std::span<std::byte> one(buffer.data(), 1);
    std::size_t after = co_await s.read(one, token);
    if (after != 0)
        throw std::runtime_error("the stream went on past its " + std::to_string(total) + " bytes");
}

task<void> both(stream& s, std::uint64_t role, std::uint64_t total, std::stop_token token) {
    co_await when_all(writer(s, role, total, token), reader(s, role, total, token));
}

stream connect_when_listening(builder& b, const std::string& address, clock_type::time_point until) {
    for (;;) {
        try {
            return sync_wait(stream::connect(b, address));
        } catch (const std::system_error& e) {
            if (clock_type::now() > until)
                throw;
            // Nothing listens there yet (the other VM is still starting):
            // there is no readiness signal across hosts but the connect itself.
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
    }
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc != 4) {
        std::fprintf(stderr, "usage: stream_peer serve|connect ADDR:PORT BYTES\n");
        return 2;
    }
    std::string mode = argv[1];
    std::string address = argv[2];
    std::uint64_t total = std::strtoull(argv[3], nullptr, 0);
    auto start = clock_type::now();
    auto deadline = start + std::chrono::seconds(600);
    builder b;
    stream s;
    std::uint64_t role = 0;
    if (mode == "serve") {
        stream_listener l = stream::serve(b, address);
        std::printf("stream_peer: listening on %s\n", l.address().c_str());
        std::fflush(stdout);
        s = sync_wait(l.accept());
    } else if (mode == "connect") {
        s = connect_when_listening(b, address, start + std::chrono::seconds(60));
        role = 1;
    } else {
        std::fprintf(stderr, "stream_peer: unknown mode '%s'\n", mode.c_str());
        return 2;
    }
    std::stop_source stop;
    // (The timer, if it fires after the run, stops nothing that is still running.)
    auto timer = s.connection().event_listener()->call_after(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()),
        [stop]() mutable { stop.request_stop(); });
    auto began = clock_type::now();
    sync_wait(both(s, role, total, stop.get_token()));
    double seconds = std::chrono::duration<double>(clock_type::now() - began).count();
    sync_wait(s.close());
    std::printf("stream_peer %s: %llu bytes each way checked in %.1f s (%.1f MB/s each way)\n", mode.c_str(),
                static_cast<unsigned long long>(total), seconds, total / seconds / 1e6);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "stream_peer: %s\n", e.what());
    return 1;
}
