// coming_from_rpc: the program docs/coming-from/rpc.md shows, for readers
// who know a classic RPC library (a Handler class, `Server s(host, port);
// s.run();`, `Client c; c.connect(host, port); c.sendRequest(msg)`). The
// regions between "// doc:NAME begin" and "// doc:NAME end" are on the page word
// for word (the unit test coming_from_docs, tests/coming_from_docs.sh, checks it).
//
// Usage: coming_from_rpc server ADDRESS            serve until SIGINT or SIGTERM
//        coming_from_rpc client ADDRESS ID CALLS   CALLS calls, each answer checked
//
// The server prints "server: listening on IP:PORT" once it listens, and at
// the end "server: stopped by signal N after M calls". A client prints
// "client ID: CALLS calls, every byte right" and exits 0, or exits 1.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/rpc_blocking.hpp>

namespace {

constexpr std::uint32_t reverse_method = 1;

// doc:handler begin
// The application's handler: a class with one virtual method, as before.
class reverser : public cordma::rpc::blocking_handler {
public:
    std::vector<std::byte> handle(std::uint32_t method, std::span<const std::byte> request) override {
        if (method != reverse_method)
            throw std::invalid_argument("no method " + std::to_string(method));
        calls.fetch_add(1);
        return std::vector<std::byte>(request.rbegin(), request.rend());  // blocking is fine here
    }
    std::atomic<long> calls{0};
};
// doc:handler end

int serve(const char* address) {
    // doc:server begin
    reverser handler;
    cordma::rpc::blocking_server server(address, handler);  // listens now; port 0: any
    std::printf("server: listening on %s\n", server.address().c_str());
    std::fflush(stdout);
    server.run();  // until server.stop(), SIGINT or SIGTERM
    // doc:server end
    std::printf("server: stopped by signal %d after %ld calls\n", server.stopped_by_signal(), handler.calls.load());
    return 0;
}

/// The request of call `i` of client `id`: its size sweeps 1 B to 20 KB
/// (across the 4 KiB eager size), its bytes depend on both.
std::string request_of(int id, int i) {
    std::string s(1 + static_cast<std::size_t>(i * 397 + id * 31) % 20000, '\0');
    for (std::size_t k = 0; k < s.size(); ++k)
        s[k] = static_cast<char>((id * 131 + i * 17 + k * 7) & 0xff);
    return s;
}

int call(const char* address, int id, int calls) {
    int wrong = 0;
    // doc:client begin
    cordma::rpc::blocking_client client;
    client.connect(address);  // or client.connect(host, port)
    for (int i = 0; i < calls; ++i) {
        std::string message = request_of(id, i);
        std::string reply = client.call(reverse_method, message);  // blocks; rpc_error on failure
        if (reply != std::string(message.rbegin(), message.rend()))
            ++wrong;
    }
    client.close();
    // doc:client end
    if (wrong != 0) {
        std::printf("client %d: %d of %d answers WRONG\n", id, wrong, calls);
        return 1;
    }
    std::printf("client %d: %d calls, every byte right\n", id, calls);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string_view mode = argc > 1 ? argv[1] : "";
    if (!((mode == "server" && argc == 3) || (mode == "client" && argc == 5))) {
        std::fprintf(stderr, "usage: coming_from_rpc server ADDRESS | client ADDRESS ID CALLS\n");
        return 2;
    }
    try {
        return mode == "server" ? serve(argv[2]) : call(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coming_from_rpc %s: %s\n", argv[1], e.what());
        return 1;
    }
}
