// rpc_classic: cordma::rpc in the shape of the classic RDMA RPC libraries:
// a handler class on the server, and a client that connects and makes
// blocking calls from plain code (no coroutines in sight).
//
// Usage: rpc_classic server ADDRESS     serve until one client said bye
//        rpc_classic client ADDRESS     three calls, each answer checked
//
// The server prints "server: listening on IP:PORT" once it listens.

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>

using namespace cordma;

namespace {

std::vector<std::byte> to_bytes(std::string_view s) {
    auto b = std::as_bytes(std::span<const char>(s.data(), s.size()));
    return {b.begin(), b.end()};
}
std::string to_string(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

/// The application: one method that answers a message, one that ends.
class Handler {
public:
    virtual ~Handler() = default;
    virtual std::string handle_request(const std::string& message) = 0;
};

class Greeter : public Handler {
public:
    std::string handle_request(const std::string& message) override { return "hello, " + message + "!"; }
};

/// A server that runs a Handler: `Server s(address, handler); s.run();`.
class Server {
public:
    Server(std::string address, Handler& handler) : address_(std::move(address)), server_(b_) {
        server_.handle(1, "request", [&handler](rpc::request r) -> task<std::vector<std::byte>> {
            co_return to_bytes(handler.handle_request(to_string(r.bytes())));
        });
        server_.handle(2, "bye", [this](rpc::request) -> task<std::vector<std::byte>> {
            stop_.request_stop();
            co_return std::vector<std::byte>{};
        });
    }
    void run() {
        listener l = b_.listen(address_);
        std::printf("server: listening on %s\n", l.address().c_str());
        std::fflush(stdout);
        sync_wait(server_.serve(l, stop_.get_token()));
    }

private:
    std::string address_;
    builder b_;
    rpc::server server_;
    std::stop_source stop_;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || (std::string_view(argv[1]) != "server" && std::string_view(argv[1]) != "client")) {
        std::fprintf(stderr, "usage: rpc_classic server|client ADDRESS\n");
        return 2;
    }
    try {
        if (std::string_view(argv[1]) == "server") {
            Greeter greeter;
            Server s(argv[2], greeter);
            s.run();
            std::printf("server: done\n");
            return 0;
        }
        builder b;
        rpc::client c = sync_wait(rpc::client::connect(b, argv[2]));
        int wrong = 0;
        std::vector<std::string> names{"world", "RDMA", std::string(10000, 'x')};  // the last over the eager size
        for (const std::string& name : names) {
            std::string answer = to_string(c.call_sync(1, to_bytes(name)));
            bool ok = answer == "hello, " + name + "!";
            wrong += ok ? 0 : 1;
            std::printf("client: %.40s%s -> %.40s%s %s\n", name.c_str(), name.size() > 40 ? "..." : "",
                        answer.c_str(), answer.size() > 40 ? "..." : "", ok ? "(right)" : "(WRONG)");
        }
        c.call_sync(2, {});
        return wrong == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_classic: %s\n", e.what());
        return 1;
    }
}
