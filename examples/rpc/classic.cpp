// rpc_classic: cordma::rpc in the shape of the classic RDMA RPC libraries
// (cordma/rpc_blocking.hpp): a handler class on the server, and a client
// that connects and makes blocking calls from plain code (no coroutines in
// sight).
//
// Usage: rpc_classic server ADDRESS     serve until one client said bye
//                                       (or SIGINT / SIGTERM)
//        rpc_classic client ADDRESS     three calls, each answer checked
//
// The server prints "server: listening on IP:PORT" once it listens.

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/rpc_blocking.hpp>

using namespace cordma;

namespace {

enum method : std::uint32_t { request = 1, bye = 2 };

/// The application: answers a message. (bye is a function of its own,
/// registered on the server below.)
class greeter : public rpc::blocking_handler {
public:
    std::vector<std::byte> handle(std::uint32_t, std::span<const std::byte> message) override {
        return rpc::bytes_of("hello, " + rpc::text_of(message) + "!");
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || (std::string_view(argv[1]) != "server" && std::string_view(argv[1]) != "client")) {
        std::fprintf(stderr, "usage: rpc_classic server|client ADDRESS\n");
        return 2;
    }
    try {
        if (std::string_view(argv[1]) == "server") {
            greeter g;
            rpc::blocking_server s(argv[2], g);
            s.handle(bye, "bye", [&s](std::span<const std::byte>) {
                s.stop();  // run() returns once this call is answered
                return std::vector<std::byte>{};
            });
            std::printf("server: listening on %s\n", s.address().c_str());
            std::fflush(stdout);
            s.run();
            std::printf("server: done\n");
            return 0;
        }
        rpc::blocking_client c;
        c.connect(argv[2]);
        int wrong = 0;
        std::vector<std::string> names{"world", "RDMA", std::string(10000, 'x')};  // the last over the eager size
        for (const std::string& name : names) {
            std::string answer = c.call(request, name);
            bool ok = answer == "hello, " + name + "!";
            wrong += ok ? 0 : 1;
            std::printf("client: %.40s%s -> %.40s%s %s\n", name.c_str(), name.size() > 40 ? "..." : "",
                        answer.c_str(), answer.size() > 40 ? "..." : "", ok ? "(right)" : "(WRONG)");
        }
        (void)c.call(bye, "");
        return wrong == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_classic: %s\n", e.what());
        return 1;
    }
}
