// cordma_collectives: cordma::group's collectives, timed exactly as
// mpi_collectives.c times Open MPI's, so bench/collectives/run can put the
// two side by side. Started by mpirun (or any launcher
// group_options::from_environment() knows); it is no MPI program.
//
// For every collective and size: one untimed call whose result every rank
// checks (a benchmark that moves the wrong bytes is worthless), warm-up
// calls, then `iters` timed calls. Each timed call is preceded by an untimed
// group barrier; each rank times its own call with CLOCK_MONOTONIC (the clock
// mpi_collectives uses, so both pay the same for reading it), and the
// iteration's time is the largest over the ranks (an all_reduce max after
// the loop, untimed). p50 and p90 are nearest-rank percentiles of those.
//
// Sizes: broadcast and all_reduce, the whole buffer (all_reduce: double,
// sum); all_to_all and all_gather, the block each rank sends to each rank.
// Barrier moves nothing (bytes 0).
//
// Everything runs in one coroutine under one sync_wait: every collective
// resumes on the builder's event listener thread, so timing starts and stops
// on that thread with no hop between.
//
// Output: one JSON object per line on rank 0's stdout, as mpi_collectives:
//   {"impl":"cordma","op":"bcast","bytes":4096,"ranks":4,"p50_us":..,"p90_us":..,"iters":..}

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/group.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;

namespace {

enum class op { barrier, bcast, alltoall, allgather, allreduce };
constexpr op all_ops[] = {op::barrier, op::bcast, op::alltoall, op::allgather, op::allreduce};
// The names mpi_collectives prints, so the report can pair the two.
const char* name_of(op o) {
    switch (o) {
    case op::barrier: return "barrier";
    case op::bcast: return "bcast";
    case op::alltoall: return "alltoall";
    case op::allgather: return "allgather";
    case op::allreduce: return "allreduce";
    }
    return "?";
}

// mpi_collectives' list: powers of 8 from 8 B, then 1 MiB.
constexpr std::size_t all_sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576};

struct config {
    int iters = 200;
    int min_iters = 10;
    int warmup = -1;  // -1: iterations / 10, at least 2
    std::size_t min_size = 8;
    std::size_t max_size = 1 << 20;
    bool want[5] = {true, true, true, true, true};
    std::string device;
    polling_mode polling = polling_mode::event;
};

using cordma_bench::option_reader;
using cordma_bench::parse_polling;
using cordma_bench::usage_error;
using cordma_bench::parse_number;

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: mpirun ... cordma_collectives [options]\n"
                 "  -n, --iters N       timed calls per collective and size, small sizes (default 200)\n"
                 "      --min-iters N   fewest timed calls at large sizes (default 10)\n"
                 "  -w, --warmup N      untimed calls before timing (default: iterations/10, at least 2)\n"
                 "      --min-size B    smallest size in bytes (default 8)\n"
                 "  -m, --max-size B    largest size in bytes (default 1048576)\n"
                 "  -o, --ops LIST      comma-separated: barrier,bcast,alltoall,allgather,allreduce (default all)\n"
                 "  -d, --device NAME   RDMA device (default: the first with an active port)\n"
                 "  -p, --polling MODE  event (default, the builder's), busy, yielding or adaptive\n"
                 "Sizes: 8, 64, 512, 4096, 32768, 262144 and 1048576 bytes, those within [min-size, max-size].\n"
                 "The group forms from the launcher's environment (PMIx under mpirun; see group_options).\n"
                 "One JSON line per collective and size on rank 0's stdout.\n");
}

config parse(int argc, char** argv) {
    config cfg;
    for (option_reader options(argc, argv, usage); options.next();) {
        std::string_view arg = options.arg(), name = options.name();
        auto value = [&] { return options.value(); };
        if (name == "-n" || name == "--iters") {
            cfg.iters = static_cast<int>(parse_number(name, value(), 1, 1000000));
        } else if (name == "--min-iters") {
            cfg.min_iters = static_cast<int>(parse_number(name, value(), 1, 1000000));
        } else if (name == "-w" || name == "--warmup") {
            cfg.warmup = static_cast<int>(parse_number(name, value(), 0, 1000000));
        } else if (name == "--min-size") {
            cfg.min_size = static_cast<std::size_t>(parse_number(name, value(), 8, 1L << 30));
        } else if (name == "-m" || name == "--max-size") {
            cfg.max_size = static_cast<std::size_t>(parse_number(name, value(), 8, 1L << 30));
        } else if (name == "-o" || name == "--ops") {
            std::fill(std::begin(cfg.want), std::end(cfg.want), false);
            std::string_view list = value();
            while (!list.empty()) {
                auto comma = list.find(',');
                std::string_view tok = list.substr(0, comma);
                auto it = std::find_if(std::begin(all_ops), std::end(all_ops),
                                       [&](op o) { return tok == name_of(o); });
                if (it == std::end(all_ops))
                    throw usage_error("unknown op '" + std::string(tok) +
                                      "' (barrier,bcast,alltoall,allgather,allreduce)");
                cfg.want[static_cast<int>(*it)] = true;
                list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            }
        } else if (name == "-d" || name == "--device") {
            cfg.device = std::string(value());
        } else if (name == "-p" || name == "--polling") {
            cfg.polling = parse_polling(value(), "event, busy or adaptive");
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }
    cfg.min_iters = std::min(cfg.min_iters, cfg.iters);
    return cfg;
}

// mpi_collectives.c's iterations_for, the same rule.
int iterations_for(std::size_t bytes, int iters, int min_iters) {
    const std::size_t budget = static_cast<std::size_t>(iters) * 32768;
    std::size_t n = bytes > 32768 ? budget / bytes : static_cast<std::size_t>(iters);
    n = std::clamp(n, static_cast<std::size_t>(min_iters), static_cast<std::size_t>(iters));
    return static_cast<int>(n);
}

double now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double percentile(const std::vector<double>& sorted, double p) {
    int n = static_cast<int>(sorted.size());
    int k = std::clamp(static_cast<int>(std::ceil(p * n)), 1, n);
    return sorted[static_cast<std::size_t>(k - 1)];
}

// mpi_collectives.c's pattern, byte for byte.
unsigned char pattern(int from, int to, std::size_t i) {
    return static_cast<unsigned char>(from * 31 + to * 7 + i * 13 + (i >> 8) + 1);
}

struct buffers {
    local_mr send;
    local_mr recv;
    unsigned char* s() const { return reinterpret_cast<unsigned char*>(send.data()); }
    unsigned char* r() const { return reinterpret_cast<unsigned char*>(recv.data()); }
};

void prepare(op o, std::size_t bytes, int rank, int ranks, const buffers& b) {
    const std::size_t n = static_cast<std::size_t>(ranks);
    switch (o) {
    case op::barrier:
        break;
    case op::bcast:
        for (std::size_t i = 0; i < bytes; i++) b.s()[i] = rank == 0 ? pattern(0, 0, i) : 0xee;
        break;
    case op::alltoall:
        for (int r = 0; r < ranks; r++)
            for (std::size_t i = 0; i < bytes; i++) b.s()[static_cast<std::size_t>(r) * bytes + i] = pattern(rank, r, i);
        std::memset(b.r(), 0xee, n * bytes);
        break;
    case op::allgather:
        for (std::size_t i = 0; i < bytes; i++) b.s()[i] = pattern(rank, 0, i);
        std::memset(b.r(), 0xee, n * bytes);
        break;
    case op::allreduce: {
        // Small integers: every partial sum is exact, in any order of addition.
        auto* d = reinterpret_cast<double*>(b.send.data());
        for (std::size_t i = 0; i < bytes / sizeof(double); i++) d[i] = (rank + 1.0) * static_cast<double>(i % 1000 + 1);
        std::memset(b.r(), 0xee, bytes);
        break;
    }
    }
}

// Empty if right, else what is wrong where.
std::string check(op o, std::size_t bytes, int rank, int ranks, const buffers& b) {
    char what[200];
    auto wrong = [&](int block, std::size_t i, unsigned got, unsigned want) {
        std::snprintf(what, sizeof what, "%s %zu B: block %d byte %zu is %#x, expected %#x", name_of(o), bytes, block,
                      i, got, want);
        return std::string(what);
    };
    switch (o) {
    case op::barrier:
        return {};
    case op::bcast:
        for (std::size_t i = 0; i < bytes; i++)
            if (b.s()[i] != pattern(0, 0, i)) return wrong(0, i, b.s()[i], pattern(0, 0, i));
        return {};
    case op::alltoall:
        for (int r = 0; r < ranks; r++)
            for (std::size_t i = 0; i < bytes; i++) {
                unsigned got = b.r()[static_cast<std::size_t>(r) * bytes + i];
                if (got != pattern(r, rank, i)) return wrong(r, i, got, pattern(r, rank, i));
            }
        return {};
    case op::allgather:
        for (int r = 0; r < ranks; r++)
            for (std::size_t i = 0; i < bytes; i++) {
                unsigned got = b.r()[static_cast<std::size_t>(r) * bytes + i];
                if (got != pattern(r, 0, i)) return wrong(r, i, got, pattern(r, 0, i));
            }
        return {};
    case op::allreduce: {
        const auto* d = reinterpret_cast<const double*>(b.recv.data());
        const double ranksum = ranks * (ranks + 1) / 2.0;
        for (std::size_t i = 0; i < bytes / sizeof(double); i++)
            if (d[i] != ranksum * static_cast<double>(i % 1000 + 1)) {
                std::snprintf(what, sizeof what, "allreduce %zu B: element %zu is %g, expected %g", bytes, i, d[i],
                              ranksum * static_cast<double>(i % 1000 + 1));
                return what;
            }
        return {};
    }
    }
    return "unknown op";
}

task<void> run_op(group& g, op o, std::size_t bytes, const buffers& b) {
    const std::size_t n = static_cast<std::size_t>(g.size());
    switch (o) {
    case op::barrier:
        co_await g.barrier();
        break;
    case op::bcast:
        // In place in `send`, as mpi_collectives' MPI_Bcast.
        co_await g.broadcast(b.send.slice(0, bytes), 0);
        break;
    case op::alltoall:
        co_await g.all_to_all(b.send.slice(0, n * bytes), b.recv.slice(0, n * bytes));
        break;
    case op::allgather:
        co_await g.all_gather(b.send.slice(0, bytes), b.recv.slice(0, n * bytes));
        break;
    case op::allreduce:
        co_await g.all_reduce<double>(b.send.slice(0, bytes), b.recv.slice(0, bytes), reduce_op::sum);
        break;
    }
}

task<int> bench(const config& cfg) {
    builder b;
    if (!cfg.device.empty()) b.device(cfg.device);
    b.polling(cfg.polling);
    group_options options = group_options::from_environment();
    std::string described = options.describe();
    group g = co_await group::form(b, std::move(options));
    const int rank = g.rank(), ranks = g.size();
    if (rank == 0)
        std::fprintf(stderr, "cordma_collectives: group of %d formed (%s), %s polling\n", ranks, described.c_str(),
                     to_string(cfg.polling));

    std::vector<std::size_t> sizes;
    for (std::size_t s : all_sizes)
        if (s >= cfg.min_size && s <= cfg.max_size) sizes.push_back(s);
    const std::size_t largest = sizes.empty() ? 8 : *std::max_element(sizes.begin(), sizes.end());

    buffers bufs{g.allocate(static_cast<std::size_t>(ranks) * largest),
                 g.allocate(static_cast<std::size_t>(ranks) * largest)};
    // Registered too: the per-iteration times and the check's verdict travel
    // through all_reduce (max), like mpi_collectives' MPI_Reduce/MPI_Allreduce.
    const std::size_t max_iters = static_cast<std::size_t>(cfg.iters);
    local_mr times = g.allocate(max_iters * sizeof(double));
    local_mr maxima = g.allocate(max_iters * sizeof(double));
    local_mr verdict = g.allocate(2 * sizeof(std::int32_t));
    auto* t = reinterpret_cast<double*>(times.data());
    auto* verdict_words = reinterpret_cast<std::int32_t*>(verdict.data());

    int failed = 0;
    for (op o : all_ops) {
        if (!cfg.want[static_cast<int>(o)]) continue;
        std::vector<std::size_t> op_sizes = o == op::barrier ? std::vector<std::size_t>{0} : sizes;
        for (std::size_t bytes : op_sizes) {
            const int n = iterations_for(bytes, cfg.iters, cfg.min_iters);
            const int w = cfg.warmup >= 0 ? cfg.warmup : std::max(2, n / 10);

            prepare(o, bytes, rank, ranks, bufs);
            co_await g.barrier();
            co_await run_op(g, o, bytes, bufs);
            std::string wrong = check(o, bytes, rank, ranks, bufs);
            if (!wrong.empty()) std::fprintf(stderr, "cordma_collectives: rank %d: %s\n", rank, wrong.c_str());
            verdict_words[0] = wrong.empty() ? 0 : 1;
            co_await g.all_reduce<std::int32_t>(verdict.slice(0, 4), verdict.slice(4, 4), reduce_op::max);
            if (verdict_words[1] != 0) {
                if (rank == 0)
                    std::fprintf(stderr, "cordma_collectives: %s %zu B moved wrong bytes: not timed\n", name_of(o),
                                 bytes);
                failed = 1;
                continue;
            }

            for (int i = 0; i < w; i++) co_await run_op(g, o, bytes, bufs);
            for (int i = 0; i < n; i++) {
                co_await g.barrier();
                const double t0 = now_us();
                co_await run_op(g, o, bytes, bufs);
                t[i] = now_us() - t0;
            }
            const std::size_t len = static_cast<std::size_t>(n) * sizeof(double);
            co_await g.all_reduce<double>(times.slice(0, len), maxima.slice(0, len), reduce_op::max);
            if (rank == 0) {
                const auto* m = reinterpret_cast<const double*>(maxima.data());
                std::vector<double> sorted(m, m + n);
                std::sort(sorted.begin(), sorted.end());
                std::printf("{\"impl\":\"cordma\",\"op\":\"%s\",\"bytes\":%zu,\"ranks\":%d,\"p50_us\":%.3f,"
                            "\"p90_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"iters\":%d,\"warmup\":%d,"
                            "\"polling\":\"%s\"}\n",
                            name_of(o), bytes, ranks, percentile(sorted, 0.5), percentile(sorted, 0.9), sorted.front(),
                            sorted.back(), n, w, to_string(cfg.polling));
                std::fflush(stdout);
            }
        }
    }
    co_await g.close();
    co_return failed;
}

}  // namespace

int main(int argc, char** argv) try {
    config cfg = parse(argc, argv);
    return sync_wait(bench(cfg));
} catch (const usage_error& e) {
    std::fprintf(stderr, "cordma_collectives: %s\n", e.what());
    usage(stderr);
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "cordma_collectives: %s\n", e.what());
    return 1;
}
