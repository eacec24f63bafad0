// cordma-stat: a running program's cordma connections, live, read from
// its metrics endpoint (metrics_endpoint.hpp, CORDMA_METRICS): what each
// kind of operation, each peer host, each rpc method and the busiest queue
// pairs did over the last interval, top-like.
//
//   cordma-stat unix:/tmp/app.sock            (refreshes every second)
//   cordma-stat -n 1 --plain 127.0.0.1:9464   (one view, for a log)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>
#include <thread>

#include "view.hpp"

namespace {

void usage(FILE* to) {
    std::fputs("usage: cordma-stat [-i SECONDS] [-n COUNT] [-q QPS] [-s OPS] [--plain] ADDRESS\n"
               "  ADDRESS            a metrics endpoint: unix:/path, /path, or HOST:PORT\n"
               "                     (CORDMA_METRICS=... or cordma::metrics_endpoint in the program)\n"
               "  -i, --interval S   seconds between samples (default 1; rates are over it)\n"
               "  -n, --count N      views shown before exiting (default: until interrupted)\n"
               "  -q, --queue-pairs N  queue pairs listed, busiest first (default 10; 0: none)\n"
               "  -s, --stuck N      pending operations listed, oldest first (default 5; 0: none)\n"
               "      --plain        no screen clearing: each view follows the last (the default\n"
               "                     when the output is not a terminal)\n"
               "  -h, --help         this text\n",
               to);
}

}  // namespace

int main(int argc, char** argv) {
    cordma_stat::view_options options;
    double interval = 1.0;
    long count = -1;
    bool plain = isatty(STDOUT_FILENO) == 0;
    std::string address;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "cordma-stat: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        auto number = [&](const std::string& text, double low) {
            char* end = nullptr;
            double v = std::strtod(text.c_str(), &end);
            if (text.empty() || *end != '\0' || !(v >= low)) {
                std::fprintf(stderr, "cordma-stat: %s %s: expected a number of at least %g\n", a.c_str(),
                             text.c_str(), low);
                std::exit(2);
            }
            return v;
        };
        if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else if (a == "-i" || a == "--interval") {
            interval = number(value(), 0.01);
        } else if (a == "-n" || a == "--count") {
            count = static_cast<long>(number(value(), 1));
        } else if (a == "-q" || a == "--queue-pairs") {
            options.queue_pairs = static_cast<std::size_t>(number(value(), 0));
        } else if (a == "-s" || a == "--stuck") {
            options.stuck = static_cast<std::size_t>(number(value(), 0));
        } else if (a == "--plain") {
            plain = true;
        } else if (!a.empty() && a[0] == '-') {
            std::fprintf(stderr, "cordma-stat: unknown option %s\n", a.c_str());
            usage(stderr);
            return 2;
        } else if (address.empty()) {
            address = a;
        } else {
            std::fprintf(stderr, "cordma-stat: one address only (%s, then %s)\n", address.c_str(), a.c_str());
            return 2;
        }
    }
    if (address.empty()) {
        usage(stderr);
        return 2;
    }
    options.address = address;
    options.interval = interval;
    try {
        cordma_stat::reading before = cordma_stat::read(address, options.stuck);
        for (long shown = 0; count < 0 || shown < count; ++shown) {
            std::this_thread::sleep_for(std::chrono::duration<double>(interval));
            cordma_stat::reading now = cordma_stat::read(address, options.stuck);
            std::string text = cordma_stat::render(before, now, options);
            if (!plain)
                std::fputs("\033[H\033[2J", stdout);
            else if (shown > 0)
                std::fputs("\n", stdout);
            std::fputs(text.c_str(), stdout);
            std::fflush(stdout);
            before = std::move(now);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma-stat: %s\n", e.what());
        return 1;
    }
    return 0;
}
