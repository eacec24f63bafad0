// A rank of a group in a process of its own, for the tests that need one
// to die (group_test). Usage: group_peer HOSTS RANK MODE, HOSTS
// comma-separated. Modes:
//   hang    form, pass one barrier, then do nothing until killed (the
//           test kills it while the other ranks wait for it)
//   barrier form, pass one barrier, close, exit 0

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/group.hpp>
#include <cordma/sync_wait.hpp>

using namespace cordma;

int main(int argc, char** argv) try {
    if (argc != 4) {
        std::fprintf(stderr, "usage: group_peer HOSTS RANK hang|barrier\n");
        return 2;
    }
    std::vector<std::string> hosts;
    std::stringstream list(argv[1]);
    for (std::string h; std::getline(list, h, ',');)
        hosts.push_back(h);
    std::string mode = argv[3];
    builder b;
    if (const char* device = std::getenv("RXE_VM_DEVICE"))
        b.device(device);
    group_options o = group_options::from_hosts(hosts, std::stoi(argv[2]));
    o.formation_timeout = std::chrono::seconds(30);
    group g = sync_wait(group::form(b, o));
    sync_wait(g.barrier());
    if (mode == "hang")
        for (;;)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    sync_wait(g.close());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "group_peer: %s\n", e.what());
    return 1;
}
