// A rank of a group in a process of its own, for the tests whose ranks
// must be processes: one killed while the others wait (group_test), and
// the scenarios across several VMs (tests/hosts/). Usage:
//
//   group_peer HOSTS RANK MODE [R]      (HOSTS comma-separated host:port)
//
// Modes:
//   hang            form, pass a barrier, then do nothing until killed
//   barrier         form, pass a barrier, close, exit 0
//   die             form, pass a barrier, then SIGKILL itself (a crash in
//                   the middle of the group's life)
//   poweroff        form, pass a barrier, then power its VM off at once
//                   (tools/rxe-vm only: writes 0 to $RXE_VM_RC first): no
//                   disconnect reaches anyone, the host is just gone
//   expect-death R  form, pass a barrier, then broadcast from rank R (which
//                   dies instead); exit 0 only if the broadcast fails with
//                   group_error naming rank R within 5 s
//   expect-missing R
//                   form with a 15 s formation deadline (the VMs of the
//                   ranks that do start may boot, and answer, seconds apart
//                   on a loaded host); exit 0 only if it fails naming rank
//                   R alone (which never starts) within 15 to 25 s
// Every mode prints what it saw; the device is RXE_VM_DEVICE's if set.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/group.hpp>
#include <cordma/sync_wait.hpp>

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

long long ms_since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

bool names(const group_error& e, int rank) {
    return e.ranks().size() == 1 && e.ranks()[0] == rank;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 4 || argc > 5) {
        std::fprintf(stderr, "usage: group_peer HOSTS RANK hang|barrier|die|expect-death R|expect-missing R\n");
        return 2;
    }
    std::vector<std::string> hosts;
    std::stringstream list(argv[1]);
    for (std::string h; std::getline(list, h, ',');)
        hosts.push_back(h);
    int rank = std::stoi(argv[2]);
    std::string mode = argv[3];
    int other = argc == 5 ? std::stoi(argv[4]) : -1;
    builder b;
    if (const char* device = std::getenv("RXE_VM_DEVICE"))
        b.device(device);
    group_options o = group_options::from_hosts(hosts, rank);
    o.formation_timeout = std::chrono::seconds(mode == "expect-missing" ? 15 : 60);
    // Powering off is noticed by silence: 3 s of it here (the default, 10 s,
    // allows for hosts that stall), so the death is named within 5 s.
    o.peer_timeout = std::chrono::seconds(3);
    o.operation_timeout = std::chrono::seconds(60);

    if (mode == "expect-missing") {
        auto start = clock_type::now();
        try {
            sync_wait(group::form(b, o));
        } catch (const group_error& e) {
            long long took = ms_since(start);
            std::printf("rank %d: formation failed after %lld ms: %s\n", rank, took, e.what());
            return names(e, other) && took >= 15000 && took < 25000 ? 0 : 1;
        }
        std::printf("rank %d: the group formed without rank %d\n", rank, other);
        return 1;
    }

    group g = sync_wait(group::form(b, o));
    if (mode == "expect-death") {
        // The dying rank leaves as soon as it has passed the barrier, and
        // passing it does not wait for its own last message to arrive: the
        // death can come first, and then this barrier fails, which must name
        // the dead rank as the broadcast's failure would.
        auto start = clock_type::now();
        try {
            sync_wait(g.barrier());
        } catch (const group_error& e) {
            long long took = ms_since(start);
            std::printf("rank %d: rank %d died before the barrier ended; it failed after %lld ms: %s\n", rank,
                        other, took, e.what());
            return names(e, other) && took < 5000 ? 0 : 1;
        }
    } else {
        sync_wait(g.barrier());
    }
    std::printf("rank %d: formed and passed a barrier\n", rank);
    std::fflush(stdout);
    if (mode == "hang")
        for (;;)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    if (mode == "die")
        kill(getpid(), SIGKILL);
    if (mode == "poweroff") {
        const char* rc = std::getenv("RXE_VM_RC");
        if (!rc) {
            std::fprintf(stderr, "group_peer: poweroff runs only inside tools/rxe-vm\n");
            return 1;
        }
        if (FILE* f = std::fopen(rc, "w")) {
            std::fputs("0\n", f);
            std::fclose(f);
        }
        sync();
        if (FILE* trigger = std::fopen("/proc/sysrq-trigger", "w")) {
            std::fputs("o", trigger);  // power off now, no shutdown, no goodbye
            std::fclose(trigger);
        }
        for (;;)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (mode == "expect-death") {
        local_mr buf = g.allocate(64);
        auto start = clock_type::now();
        try {
            sync_wait(g.broadcast(buf, other));
        } catch (const group_error& e) {
            long long took = ms_since(start);
            std::printf("rank %d: the broadcast failed after %lld ms: %s\n", rank, took, e.what());
            return names(e, other) && took < 5000 ? 0 : 1;
        }
        std::printf("rank %d: the broadcast from dead rank %d passed\n", rank, other);
        return 1;
    }
    sync_wait(g.close());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "group_peer: %s\n", e.what());
    return 1;
}
