// collectives: every collective of cordma::group, each checked byte for
// byte, at an inline size and at a size read from the sender's buffer,
// with the time each took on this rank.
//
//   collectives --rank R --hosts H0,H1,...      or under a launcher:
//   mpirun -np 4 collectives
//
// Exit status 0 only if every result was right on this rank.

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/group.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include "group_command_line.hpp"

using namespace cordma;

namespace {

std::byte pattern(int rank, int block, std::size_t i) {
    return static_cast<std::byte>((rank * 131 + block * 17 + static_cast<int>(i)) & 0xff);
}

void fill(local_slice s, int rank, int block) {
    for (std::size_t i = 0; i < s.size(); ++i)
        s.data()[i] = pattern(rank, block, i);
}

bool holds(local_slice s, int rank, int block) {
    for (std::size_t i = 0; i < s.size(); ++i)
        if (s.data()[i] != pattern(rank, block, i))
            return false;
    return true;
}

struct report {
    int rank;
    bool quiet;
    int wrong = 0;
    std::chrono::steady_clock::time_point started;
    void start() { started = std::chrono::steady_clock::now(); }
    void done(const char* what, std::size_t bytes, bool ok) {
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
        if (!ok)
            ++wrong;
        if (!quiet || !ok)
            std::printf("rank %d: %-22s %8zu B  %8lld us  %s\n", rank, what, bytes, static_cast<long long>(us.count()),
                        ok ? "ok" : "WRONG");
    }
};

task<int> run(group g, bool quiet) {
    int n = g.size(), r = g.rank();
    auto blocks = static_cast<std::size_t>(n);
    report rep{r, quiet, 0, {}};
    for (std::size_t size : {std::size_t(64), std::size_t(256 * 1024)}) {
        rep.start();
        co_await g.barrier();
        rep.done("barrier", 0, true);

        local_mr a = g.allocate(size * blocks), b = g.allocate(size * blocks), one = g.allocate(size);
        for (int root = 0; root < n; ++root) {
            if (r == root)
                fill(one, root, 1);
            else
                std::memset(one.data(), 0, size);
            rep.start();
            co_await g.broadcast(one, root);
            rep.done(("broadcast root " + std::to_string(root)).c_str(), size, holds(one, root, 1));
        }

        for (int p = 0; p < n; ++p)
            fill(a.slice(static_cast<std::size_t>(p) * size, size), r, p);
        for (auto order : {all_to_all_order::pairwise, all_to_all_order::sequential}) {
            std::memset(b.data(), 0, b.size());
            rep.start();
            co_await g.all_to_all(a, b, order);
            bool ok = true;
            for (int p = 0; p < n; ++p)
                ok = ok && holds(b.slice(static_cast<std::size_t>(p) * size, size), p, r);
            rep.done(order == all_to_all_order::pairwise ? "all_to_all pairwise" : "all_to_all sequential", size, ok);
        }

        fill(one, r, 2);
        std::memset(b.data(), 0, b.size());
        rep.start();
        co_await g.all_gather(one, b);
        bool ok = true;
        for (int p = 0; p < n; ++p)
            ok = ok && holds(b.slice(static_cast<std::size_t>(p) * size, size), p, 2);
        rep.done("all_gather", size, ok);

        int root = n - 1;
        std::memset(b.data(), 0, b.size());
        local_slice at_root = r == root ? b.all() : local_slice{};
        rep.start();
        co_await g.gather(one, at_root, root);
        ok = true;
        if (r == root)
            for (int p = 0; p < n; ++p)
                ok = ok && holds(b.slice(static_cast<std::size_t>(p) * size, size), p, 2);
        rep.done("gather", size, ok);

        if (r == root)
            for (int p = 0; p < n; ++p)
                fill(b.slice(static_cast<std::size_t>(p) * size, size), root, 10 + p);
        rep.start();
        co_await g.scatter(at_root, one, root);
        rep.done("scatter", size, holds(one, root, 10 + r));

        std::size_t count = size / sizeof(double);
        auto* x = reinterpret_cast<double*>(a.data());
        for (std::size_t i = 0; i < count; ++i)
            x[i] = static_cast<double>(r + 1) * static_cast<double>(i);
        local_slice xs = a.slice(0, count * sizeof(double)), ys = b.slice(0, count * sizeof(double));
        rep.start();
        co_await g.all_reduce<double>(xs, ys, reduce_op::sum);
        auto* y = reinterpret_cast<double*>(b.data());
        ok = true;
        for (std::size_t i = 0; i < count; ++i)
            ok = ok && y[i] == n * (n + 1) / 2.0 * static_cast<double>(i);
        rep.done("all_reduce sum double", size, ok);

        auto* k = reinterpret_cast<std::int64_t*>(a.data());
        for (std::size_t i = 0; i < count; ++i)
            k[i] = static_cast<std::int64_t>(i) * (r % 2 == 0 ? 1 : -1) + r;
        local_slice reduced = r == 0 ? ys : local_slice{};
        rep.start();
        co_await g.reduce<std::int64_t>(xs, reduced, reduce_op::max, 0);
        ok = true;
        if (r == 0) {
            auto* m = reinterpret_cast<std::int64_t*>(b.data());
            for (std::size_t i = 0; i < count; ++i) {
                std::int64_t best = INT64_MIN;
                for (int p = 0; p < n; ++p)
                    best = std::max(best, static_cast<std::int64_t>(i) * (p % 2 == 0 ? 1 : -1) + p);
                ok = ok && m[i] == best;
            }
        }
        rep.done("reduce max int64", size, ok);
    }
    co_await g.barrier();
    co_await g.close();
    std::printf("rank %d of %d: %s\n", r, n, rep.wrong == 0 ? "every collective was right" : "SOME WERE WRONG");
    co_return rep.wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return examples::run_group_example("collectives", argc, argv,
                                       [](group g, examples::group_command_line o) { return run(g, o.quiet); });
}
