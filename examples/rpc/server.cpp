// rpc_server: answers calls from many clients at once, on cordma::rpc.
//
// Usage: rpc_server ADDRESS [--credits N] [--clients N] [--accept-timeout S]
//   ADDRESS      where to listen: "ip:port", ip an address of an RDMA device
//                (or 0.0.0.0), port 0 for any free one
//   --credits N  calls each client may have in flight (default 64)
//   --clients N  exit once N clients have said bye (default: serve until
//                killed)
//   --accept-timeout S
//                exit with status 1 if no client has called within S seconds
//
// Once it listens it prints "rpc_server: listening on IP:PORT": a script can
// start its clients when that line arrives (examples/rpc/demo.sh does).
//
// The whole server is the handlers below: cordma::rpc receives every
// client's calls through one shared receive queue, runs the handler for each
// (inline on the event listener thread: they must not block), and answers.
// A client that disconnects, or breaks the protocol, goes alone.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>

#include "command_line.hpp"
#include "methods.hpp"

using namespace cordma;

namespace {

struct options {
    std::string address;
    std::uint32_t credits = 64;
    std::uint64_t clients = 0;         // 0: until killed
    std::uint64_t accept_timeout = 0;  // seconds; 0: none
};

options parse_options(int argc, char** argv) {
    if (argc < 2)
        throw rpc_demo::usage_error("ADDRESS is missing");
    options opt;
    opt.address = argv[1];
    for (int i = 2; i < argc; ++i) {
        std::string_view arg = argv[i];
        const char* value = i + 1 < argc ? argv[++i] : nullptr;
        if (arg == "--credits")
            opt.credits = static_cast<std::uint32_t>(rpc_demo::parse_number(arg, value, 1, 1024));
        else if (arg == "--clients")
            opt.clients = rpc_demo::parse_number(arg, value, 1, 1'000'000);
        else if (arg == "--accept-timeout")
            opt.accept_timeout = rpc_demo::parse_number(arg, value, 1, 86'400);
        else
            throw rpc_demo::usage_error("unknown option '" + std::string(arg) + "'");
    }
    return opt;
}

std::vector<std::byte> bytes_of(std::span<const std::byte> bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        opt = parse_options(argc, argv);
    } catch (const rpc_demo::usage_error& e) {
        std::fprintf(stderr,
                     "rpc_server: %s\nusage: rpc_server ADDRESS [--credits N] [--clients N] [--accept-timeout S]\n",
                     e.what());
        return 2;
    }
    try {
        builder b;
        rpc::server server(b, {.receives = std::max<std::size_t>(512, opt.credits), .credits = opt.credits});

        std::stop_source stop;
        std::mutex mutex;
        std::condition_variable_any first_call;  // _any: its waits take a stop_token
        bool called = false;
        std::atomic<std::uint64_t> byes{0};
        auto note_call = [&] {
            std::lock_guard lock(mutex);
            if (!called) {
                called = true;
                first_call.notify_all();
            }
        };

        server.handle(demo::echo, "echo", [&](rpc::request r) -> task<std::vector<std::byte>> {
            note_call();
            co_return bytes_of(r.bytes());
        });
        server.handle(demo::upper, "upper", [&](rpc::request r) -> task<std::vector<std::byte>> {
            note_call();
            std::vector<std::byte> out = bytes_of(r.bytes());
            for (auto& c : out)
                c = static_cast<std::byte>(std::toupper(static_cast<unsigned char>(c)));
            co_return out;
        });
        server.handle_as<demo::add_request, demo::add_response>(
            demo::add, "add", [&](demo::add_request in) -> task<demo::add_response> {
                note_call();
                co_return demo::add_response{in.a + in.b};
            });
        server.handle(demo::bye, "bye", [&](rpc::request r) -> task<std::vector<std::byte>> {
            note_call();
            std::printf("rpc_server: %s said bye\n", r.peer().c_str());
            std::fflush(stdout);
            if (opt.clients != 0 && ++byes == opt.clients)
                stop.request_stop();
            co_return std::vector<std::byte>{};
        });

        listener l = b.listen(opt.address);
        std::printf("rpc_server: listening on %s\n", l.address().c_str());
        std::fflush(stdout);

        // --accept-timeout: give up if nobody calls in time.
        bool gave_up = false;
        std::jthread watchdog([&](std::stop_token done) {
            if (opt.accept_timeout == 0)
                return;
            std::unique_lock lock(mutex);
            if (!first_call.wait_for(lock, done, std::chrono::seconds(opt.accept_timeout), [&] { return called; }) &&
                !done.stop_requested()) {
                gave_up = true;
                stop.request_stop();
            }
        });
        sync_wait(server.serve(l, stop.get_token()));
        watchdog.request_stop();
        watchdog.join();
        if (gave_up) {
            std::fprintf(stderr, "rpc_server: no client called within %llu s; giving up\n",
                         static_cast<unsigned long long>(opt.accept_timeout));
            return 1;
        }
        std::printf("rpc_server: done\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_server: %s\n", e.what());
        return 1;
    }
}
