// rpc_client: makes pipelined calls to rpc_server on cordma::rpc, checks
// every answer, and prints calls/s.
//
// Usage: rpc_client ADDRESS [--calls N] [--depth D] [--connect-timeout S]
//   ADDRESS    the server's "ip:port" (what rpc_server printed)
//   --calls N  how many calls to make (default 20000), cycling through echo,
//              upper and add, with requests of 1 B to 64 KiB (over the eager
//              size of 4 KiB, cordma::rpc lets the server read them)
//   --depth D  calls kept in flight (default 16; past the server's credits
//              they wait in the client, in order)
//   --connect-timeout S  how long connecting may take (default 10, the
//              builder's): over a lossy link a lost connect request is
//              only sent again after about 5 s, by the kernel's CM
//
// Then one call to a method the server does not have, to show the error,
// and "bye". Exits 0 only if every answer was right.

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task_group.hpp>

#include "command_line.hpp"
#include "methods.hpp"

using namespace cordma;

namespace {

struct options {
    std::string address;
    std::uint64_t calls = 20'000;
    std::uint32_t depth = 16;
    std::chrono::seconds connect_timeout{10};
};

struct tally {
    std::uint64_t next = 0;  // the next call to make
    std::uint64_t right = 0;
    std::uint64_t wrong = 0;
    std::string first_error;
};

/// Call k's request: a size from 1 B to 64 KiB, bytes that depend on k.
std::vector<std::byte> request_of(std::uint64_t k) {
    std::size_t size = k % 10 == 9 ? 64 * 1024 : 1 + (k * 2654435761u) % 3000;
    std::vector<std::byte> r(size);
    for (std::size_t i = 0; i < size; ++i)
        r[i] = static_cast<std::byte>('a' + (k + i) % 26);
    return r;
}

/// One lane: calls until `calls` have been made, each checked.
task<void> lane(rpc::client* c, std::uint64_t calls, tally* t) {
    while (t->next < calls) {
        std::uint64_t k = t->next++;
        bool ok = false;
        try {
            if (k % 3 == 2) {
                auto a = static_cast<std::int64_t>(k), b = -3 * static_cast<std::int64_t>(k);
                demo::add_response r = co_await c->call_as<demo::add_response>(demo::add, demo::add_request{a, b});
                ok = r.sum == a + b;
            } else {
                std::vector<std::byte> request = request_of(k);
                auto m = k % 3 == 0 ? demo::echo : demo::upper;
                std::vector<std::byte> response = co_await c->call(m, request);
                if (m == demo::upper)
                    for (auto& b : request)
                        b = static_cast<std::byte>(std::toupper(static_cast<unsigned char>(b)));
                ok = response == request;
            }
        } catch (const std::exception& e) {
            if (t->first_error.empty())
                t->first_error = e.what();
        }
        ++(ok ? t->right : t->wrong);
    }
}

task<int> run(options opt) {
    builder b;
    b.connect_timeout(opt.connect_timeout);
    rpc::client c = co_await rpc::client::connect(b, opt.address);
    std::printf("rpc_client: connected to %s; the server grants %u calls in flight, using %u\n", c.peer().c_str(),
                c.credits(), opt.depth);

    tally t;
    auto start = std::chrono::steady_clock::now();
    task_group lanes;
    for (std::uint32_t i = 0; i < opt.depth; ++i)
        lanes.spawn(lane(&c, opt.calls, &t));
    co_await lanes.join();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rpc_client: %llu calls, %llu right, %llu wrong, %.3f s: %.0f calls/s\n",
                static_cast<unsigned long long>(opt.calls), static_cast<unsigned long long>(t.right),
                static_cast<unsigned long long>(t.wrong), seconds, static_cast<double>(opt.calls) / seconds);
    if (!t.first_error.empty())
        std::printf("rpc_client: first error: %s\n", t.first_error.c_str());

    // An error reaches its call, and the connection stays up.
    bool refused = false;
    try {
        std::vector<std::byte> nothing;
        co_await c.call(99, nothing);
    } catch (const rpc::rpc_error& e) {
        refused = e.errc() == rpc::rpc_errc::unknown_method;
        std::printf("rpc_client: method 99: %s\n", e.what());
    }
    std::vector<std::byte> empty;
    co_await c.call(demo::bye, empty);
    co_await c.close();
    co_return t.wrong == 0 && t.right == opt.calls && refused ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        if (argc < 2)
            throw rpc_demo::usage_error("ADDRESS is missing");
        opt.address = argv[1];
        for (int i = 2; i < argc; ++i) {
            std::string_view arg = argv[i];
            const char* value = i + 1 < argc ? argv[++i] : nullptr;
            if (arg == "--calls")
                opt.calls = rpc_demo::parse_number(arg, value, 1, 1'000'000'000);
            else if (arg == "--depth")
                opt.depth = static_cast<std::uint32_t>(rpc_demo::parse_number(arg, value, 1, 1024));
            else if (arg == "--connect-timeout")
                opt.connect_timeout = std::chrono::seconds(rpc_demo::parse_number(arg, value, 1, 3600));
            else
                throw rpc_demo::usage_error("unknown option '" + std::string(arg) + "'");
        }
    } catch (const rpc_demo::usage_error& e) {
        std::fprintf(stderr, "rpc_client: %s\nusage: rpc_client ADDRESS [--calls N] [--depth D] [--connect-timeout S]\n", e.what());
        return 2;
    }
    try {
        return sync_wait(run(opt));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_client: %s\n", e.what());
        return 1;
    }
}
