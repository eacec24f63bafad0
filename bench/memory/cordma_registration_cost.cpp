// cordma_registration_cost: what the builder's cache of registrations saves
// a large read, measured three ways on the same buffer in one process:
//   - register:  register_local_mr on the buffer and let it go (ibv_reg_mr
//                and ibv_dereg_mr), what every large read cost before the
//                cache and still costs with builder::registration_cache_size 0;
//   - cached:    builder::local_registration on the same buffer again (a
//                lookup: the unmap watch's ring, the cache's lock);
//   - read:      one RDMA READ of the buffer's size from a peer's granted
//                memory into it, over a connection of the same builder
//                (what the registration is for), with the cached slice.
// Each row: median and minimum microseconds of --reps repetitions, and the
// registration's share of one read + registration. Readiness: none needed,
// one process connects to its own listener.
//
// Usage: cordma_registration_cost [-a ADDR] [--sizes L] [--reps N] [--device NAME]
//   -a ADDR     the device's IPv4 address (default: $RXE_VM_ADDR)
//   --sizes L   buffer sizes, comma-separated bytes (default 1, 4, 16, 64 MiB)
//   --reps N    repetitions of each measurement (default 20)

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

struct figures {
    double median = 0;
    double minimum = 0;
};

template <typename F>
figures measure(int reps, F&& step) {
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
        auto t0 = clock_type::now();
        step();
        us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    return {us[us.size() / 2], us.front()};
}

task<void> run(builder& b, std::string address, std::vector<std::size_t> sizes, int reps) {
    listener l = b.listen(address + ":0");
    auto [server, client] = co_await when_all(l.accept(), b.connect(l.address()));
    std::printf("| size | register + deregister (us) | cached lookup (us) | RDMA READ (us) | registration / (read + registration) |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
    for (std::size_t size : sizes) {
        void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED)
            throw std::runtime_error("mmap of " + std::to_string(size) + " bytes failed");
        auto* buffer = static_cast<std::byte*>(memory);
        std::memset(buffer, 1, size);  // the pages exist, as a program's buffer's do
        remote_mr theirs = co_await client.request_remote_mr(size);
        std::span<std::byte> whole(buffer, size);
        figures registering = measure(reps, [&] { register_local_mr(b.pd(), buffer, size, access_flags::local_write); });
        local_slice kept = b.local_registration(whole);
        figures lookup = measure(reps, [&] { local_slice again = b.local_registration(whole); });
        std::vector<double> reads;
        for (int i = 0; i < reps; ++i) {
            auto t0 = clock_type::now();
            co_await client.read(kept, theirs.slice(0, size));
            reads.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        }
        std::sort(reads.begin(), reads.end());
        double read = reads[reads.size() / 2];
        std::printf("| %zu MiB | %.1f (min %.1f) | %.2f (min %.2f) | %.1f | %.0f%% |\n", size >> 20, registering.median,
                    registering.minimum, lookup.median, lookup.minimum, read,
                    100 * registering.median / (read + registering.median));
        std::fflush(stdout);
        kept = {};
        munmap(memory, size);
    }
    registration_cache_stats s = b.registration_stats();
    std::printf("\ncache: %llu hits, %llu misses, %llu dropped as unmapped, %zu kept%s%s\n",
                static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                static_cast<unsigned long long>(s.unmapped), s.entries, s.unavailable.empty() ? "" : "; unavailable: ",
                s.unavailable.c_str());
    co_await client.close();
    co_await server.close();
}

}  // namespace

int main(int argc, char** argv) try {
    std::vector<std::size_t> sizes{1 << 20, 4 << 20, 16 << 20, 64 << 20};
    int reps = 20;
    std::string address;
    if (const char* a = std::getenv("RXE_VM_ADDR"))
        address = a;
    builder b;
    for (cordma_bench::option_reader options(argc, argv, [](std::FILE* out) {
             std::fprintf(out, "usage: cordma_registration_cost [-a ADDR] [--sizes L] [--reps N] [--device NAME]\n");
         });
         options.next();) {
        std::string_view name = options.name();
        if (name == "--sizes") {
            sizes.clear();
            std::string list(options.value());
            for (std::size_t at = 0; at <= list.size();) {
                std::size_t comma = std::min(list.find(',', at), list.size());
                sizes.push_back(static_cast<std::size_t>(
                    cordma_bench::parse_number(name, list.substr(at, comma - at), 4096, 1L << 34)));
                at = comma + 1;
            }
        } else if (name == "--reps") {
            reps = static_cast<int>(cordma_bench::parse_number(name, options.value(), 1, 100000));
        } else if (name == "-a" || name == "--address") {
            address = std::string(options.value());
        } else if (name == "--device") {
            b.device(std::string(options.value()));
        } else {
            throw cordma_bench::usage_error("unknown option '" + std::string(options.arg()) + "'");
        }
    }
    if (address.empty())
        throw cordma_bench::usage_error("no address: give -a ADDR (inside tools/rxe-vm, $RXE_VM_ADDR is used)");
    sync_wait(run(b, address, sizes, reps));
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "cordma_registration_cost: %s\n", e.what());
    return 1;
}
