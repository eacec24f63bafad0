#pragma once
// The command line shared by the group examples (mesh, collectives):
//   [--rank R --hosts H0,H1,...] [--rounds N] [--quiet] [--device D]
// Without --rank/--hosts the group comes from the launcher that started
// the program (group_options::from_environment: PMIx under mpirun or srun,
// torchrun's variables, or CORDMA_GROUP_HOSTS/CORDMA_GROUP_RANK).

#include <charconv>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/group.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

namespace examples {

/// A bad command line: main prints it with the usage and exits 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct group_command_line {
    int rank = -1;
    std::vector<std::string> hosts;
    int rounds = 10;
    bool quiet = false;
    std::string device;

    static constexpr const char* usage = "[--rank R --hosts H0,H1,...] [--rounds N] [--quiet] [--device D]";

    static int parse_int(std::string_view flag, const char* text, int low, int high) {
        int v = 0;
        std::string_view s = text ? text : "";
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < low || v > high)
            throw usage_error(std::string(flag) + " wants a number in " + std::to_string(low) + ".." +
                              std::to_string(high) + ", got '" + std::string(s) + "'");
        return v;
    }

    static group_command_line parse(int argc, char** argv) {
        group_command_line o;
        for (int i = 1; i < argc; ++i) {
            std::string_view a = argv[i];
            const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
            if (a == "--rank") {
                o.rank = parse_int(a, value, 0, 1 << 20);
                ++i;
            } else if (a == "--hosts") {
                if (!value)
                    throw usage_error("--hosts wants a comma-separated list of host:port");
                std::stringstream in(value);
                for (std::string h; std::getline(in, h, ',');)
                    o.hosts.push_back(h);
                ++i;
            } else if (a == "--rounds") {
                o.rounds = parse_int(a, value, 1, 1 << 24);
                ++i;
            } else if (a == "--device") {
                if (!value)
                    throw usage_error("--device wants a device name");
                o.device = value;
                ++i;
            } else if (a == "--quiet") {
                o.quiet = true;
            } else {
                throw usage_error("unknown argument '" + std::string(a) + "'");
            }
        }
        if (o.hosts.empty() != (o.rank < 0))
            throw usage_error("--rank and --hosts go together (or give neither, under a launcher)");
        return o;
    }

    cordma::builder make_builder() const {
        cordma::builder b;
        if (!device.empty())
            b.device(device);
        return b;
    }

    cordma::group_options make_options() const {
        return hosts.empty() ? cordma::group_options::from_environment()
                             : cordma::group_options::from_hosts(hosts, rank);
    }
};

/// The main of a group example: parses the command line (exit 2 on a bad
/// one), forms the group (saying from what), runs `body` on it and returns
/// its status (1 on any exception, with its message).
inline int run_group_example(const char* program, int argc, char** argv,
                             const std::function<cordma::task<int>(cordma::group, group_command_line)>& body) {
    group_command_line o;
    try {
        o = group_command_line::parse(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program, e.what(), program, group_command_line::usage);
        return 2;
    }
    try {
        cordma::builder b = o.make_builder();
        cordma::group_options go = o.make_options();
        std::fprintf(stderr, "%s: forming a group from the %s\n", program, go.describe().c_str());
        cordma::group g = cordma::sync_wait(cordma::group::form(b, go));
        return cordma::sync_wait(body(g, o));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 1;
    }
}

}  // namespace examples
