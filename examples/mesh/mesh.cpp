// mesh: every rank sends generated strings to every other rank, round
// after round, and checks that each string it receives arrived once and
// intact. The behaviour of the classic "full mesh" RDMA tool (each host
// listening on base port + i, connecting to the others, one send thread,
// one listen thread, one serve thread), on a cordma::group and one
// coroutine.
//
//   mesh --rank R --hosts 10.78.0.1:7600,10.78.0.2:7600,10.78.0.3:7600
//   mpirun -np 4 mesh                      (PMIx: no addresses needed)
//   RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. mesh
//
// Options (group_command_line.hpp): --rounds N (default 10), --quiet (no
// line per string), --device NAME. Each round is one all_to_all of fixed-size slots: slot p
// of a rank's send buffer is its string for rank p, and slot p of its
// receive buffer holds rank p's string for it. Exit status 0 only if every
// string of every round arrived exactly once and unchanged.

#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/group.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include "group_command_line.hpp"

using namespace cordma;

namespace {

constexpr std::size_t slot_size = 128;  // a 2-byte length, then the string

/// The string rank `from` sends rank `to` in `round`: its length varies, so
/// a truncated or shifted copy shows.
std::string generated(int from, int to, int round) {
    std::string s = "round " + std::to_string(round) + " from rank " + std::to_string(from) + " to rank " +
                    std::to_string(to) + ":";
    unsigned x = static_cast<unsigned>(from * 7919 + to * 104729 + round * 1299709) | 1u;
    std::size_t extra = 8 + x % 48;
    for (std::size_t i = 0; i < extra; ++i) {
        x = x * 1103515245u + 12345u;
        s += static_cast<char>('a' + (x >> 16) % 26);
    }
    return s;
}

void put(std::byte* slot, const std::string& s) {
    auto n = static_cast<std::uint16_t>(s.size());
    std::memcpy(slot, &n, 2);
    std::memcpy(slot + 2, s.data(), s.size());
}

std::string get(const std::byte* slot) {
    std::uint16_t n = 0;
    std::memcpy(&n, slot, 2);
    if (n > slot_size - 2)
        return "<slot says " + std::to_string(n) + " bytes>";
    return std::string(reinterpret_cast<const char*>(slot + 2), n);
}

task<int> run(group g, examples::group_command_line o) {
    int n = g.size(), r = g.rank();
    auto slots = static_cast<std::size_t>(n);
    local_mr out = g.allocate(slot_size * slots), in = g.allocate(slot_size * slots);
    std::set<std::tuple<int, int>> seen;  // (round, sender)
    int bad = 0;
    for (int round = 0; round < o.rounds; ++round) {
        for (int p = 0; p < n; ++p)
            put(out.data() + static_cast<std::size_t>(p) * slot_size, generated(r, p, round));
        std::memset(in.data(), 0, in.size());
        co_await g.all_to_all(out, in);
        for (int p = 0; p < n; ++p) {
            if (p == r)
                continue;
            std::string got = get(in.data() + static_cast<std::size_t>(p) * slot_size);
            bool ok = got == generated(p, r, round) && seen.emplace(round, p).second;
            if (!ok)
                ++bad;
            if (!o.quiet || !ok)
                std::printf("rank %d: from rank %d, slot %d: %s%s\n", r, p, p, got.c_str(), ok ? "" : "  <-- WRONG");
        }
    }
    co_await g.barrier();
    co_await g.close();
    std::size_t expected = static_cast<std::size_t>(o.rounds) * (slots - 1);
    std::printf("rank %d of %d: %zu of %zu strings arrived once and intact, %d wrong\n", r, n, seen.size(), expected,
                bad);
    co_return bad == 0 && seen.size() == expected ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return examples::run_group_example("mesh", argc, argv,
                                       [](group g, examples::group_command_line o) { return run(g, o); });
}
