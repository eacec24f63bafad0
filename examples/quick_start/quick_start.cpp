// The README's quick start, kept compiling and running: a server and a
// client in one process; the client borrows 4 KiB of the server's memory
// through the agent and writes, reads and fetch_adds on it.
//
// Usage: quick_start HOST   (an address on an RDMA device; default
//                            $CORDMA_TEST_ADDR or $RXE_VM_ADDR)

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

using namespace cordma;

task<std::uint64_t> client(builder& b, std::string address) {
    connection conn = co_await b.connect(address);                 // rdma_cm handshake
    remote_mr peer = co_await conn.request_remote_mr(          // 4 KiB of the server's memory
        4096, 64, std::chrono::seconds(30), access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic);
    local_mr buffer = b.pool()->allocate(4096);                    // registered once, from a pool
    std::memcpy(buffer.data(), "hello", 6);
    co_await conn.write(buffer.slice(0, 6), peer.slice(0, 6));     // resumed on the listener thread
    co_await conn.read(buffer.slice(8, 6), peer.slice(0, 6));
    std::uint64_t old = co_await conn.fetch_add(peer.slice(64, 8), 1);  // the word's old value
    std::printf("read back \"%s\"; fetch_add saw %llu\n", reinterpret_cast<char*>(buffer.data() + 8),
                static_cast<unsigned long long>(old));
    co_await conn.close();
    co_return old;
}

task<void> server(listener& l, std::shared_ptr<memory_pool> pool) {
    connection conn = co_await l.accept();  // the agent serves the client's requests by itself
    local_mr until_closed = pool->allocate(8);
    try {
        co_await conn.recv(until_closed.all());  // fails when the client closes
    } catch (const std::system_error&) {
    }
}

int main(int argc, char** argv) try {
    const char* host = argc > 1 ? argv[1] : std::getenv("CORDMA_TEST_ADDR");
    if (host == nullptr)
        host = std::getenv("RXE_VM_ADDR");
    if (host == nullptr) {
        std::fprintf(stderr, "usage: quick_start HOST (an IP address on an RDMA device)\n");
        return 2;
    }
    builder b;                                            // first active device, event polling
    listener l = b.listen(std::string(host) + ":0");      // any free port
    auto [served, old] = sync_wait(when_all(server(l, b.pool()), client(b, l.address())));
    (void)served;
    return old == 0 ? 0 : 1;  // the agent hands out zeroed memory
} catch (const std::exception& e) {
    std::fprintf(stderr, "quick_start: %s\n", e.what());
    return 1;
}
