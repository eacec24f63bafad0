// The other process of the builder tests. Modes:
//   echo ADDRESS    connect, receive one message, send it back, exit 0
//   sleep ADDRESS   connect, then sleep until killed
//   stream ADDRESS  open a cordma::stream to a stream listener there and
//                   write 64 KiB blocks of byte value 7 until killed
//   rpc-client ADDRESS  connect a cordma::rpc client to a server there and
//                   keep 8 calls of method 3 (slow) in flight until killed
//   rpc-server ADDRESS  serve cordma::rpc there (method 1 echo, method 3
//                   slow: answers after 3 s) until killed; prints
//                   "listening" on stdout once it listens
// An optional third argument `tcp` connects with endpoint_exchange::tcp
// (ADDRESS is then a TCP listener's) instead of rdma_cm.

#include <chrono>
#include <coroutine>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/rpc.hpp>
#include <cordma/stream.hpp>
#include <cordma/task_group.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;

namespace {

struct sleep_for {
    event_listener* listener;
    std::chrono::milliseconds delay;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { listener->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

task<void> slow_calls(rpc::client& c) {
    std::vector<std::byte> request(16, std::byte{3});
    for (;;)
        co_await c.call(3, request);
}

int rpc_peer(builder& b, const std::string& mode, const std::string& address) {
    if (mode == "rpc-client") {
        rpc::client c = sync_wait(rpc::client::connect(b, address));
        sync_wait([&]() -> task<void> {
            task_group calls;
            for (int i = 0; i < 8; ++i)
                calls.spawn(slow_calls(c));
            co_await calls.join();
        }());
        return 1;
    }
    rpc::server server(b);
    auto listener = b.event_listener();
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    server.handle(3, "slow", [listener](rpc::request r) -> task<std::vector<std::byte>> {
        co_await sleep_for{listener.get(), std::chrono::milliseconds(3000)};
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    auto l = b.listen(address);
    std::printf("listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    sync_wait(server.serve(l));
    return 0;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "tcp")) {
        std::fprintf(stderr, "usage: peer echo|sleep|stream|rpc-client|rpc-server ADDRESS [tcp]\n");
        return 2;
    }
    std::string mode = argv[1];
    builder b;
    if (argc == 4) {
        // The test process sends the moment the connection is up, while
        // this side is still registering its buffer: the default RNR
        // timer (code 0, 655 ms per retry, about 4 s in all) gives it that
        // time, over TCP as over rdma_cm.
        b.exchange(endpoint_exchange::tcp);
    }
    if (mode == "rpc-client" || mode == "rpc-server")
        return rpc_peer(b, mode, argv[2]);
    if (mode == "stream") {
        stream s = sync_wait(stream::connect(b, argv[2]));
        std::vector<std::byte> block(64 * 1024, std::byte{7});
        for (;;)
            sync_wait(s.write(block));
    }
    connection conn = sync_wait(b.connect(argv[2]));
    if (mode == "sleep") {
        for (;;)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    auto pool = b.pool();
    sync_wait([&]() -> task<void> {
        local_mr buffer = pool->allocate(4096);
        auto got = co_await conn.recv(buffer.all());
        co_await conn.send(buffer.slice(0, got.length));
    }());
    sync_wait(conn.close());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "peer: %s\n", e.what());
    return 1;
}
