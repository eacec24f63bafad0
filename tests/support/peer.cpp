// The other process of the builder tests. Modes:
//   echo ADDRESS    connect, receive one message, send it back, exit 0
//   sleep ADDRESS   connect, then sleep until killed

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <cordma/builder.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;

int main(int argc, char** argv) try {
    if (argc != 3) {
        std::fprintf(stderr, "usage: peer echo|sleep ADDRESS\n");
        return 2;
    }
    std::string mode = argv[1];
    builder b;
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
