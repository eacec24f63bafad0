// The README's quick start, kept compiling and running: write, read back and
// fetch_add over a loopback connection, resumed on the event listener.

#include <cstdio>
#include <cstring>

#include <cordma/connection.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;

// `peer` is memory the other side granted us (address, length, rkey).
task<std::uint64_t> demo(connection conn, std::shared_ptr<memory_pool> pool, remote_mr peer) {
    local_mr buffer = pool->allocate(4096);                     // registered once, from a pool
    std::memcpy(buffer.data(), "hello", 6);
    co_await conn.write(buffer.slice(0, 6), peer.slice(0, 6));  // resumed on the listener thread
    co_await conn.read(buffer.slice(0, 6), peer.slice(0, 6));
    co_return co_await conn.fetch_add(peer.slice(64, 8), 1);    // the word's old value
}

int main() try {
    auto listener = event_listener::start(device_context::open());  // first active device
    auto [a, b] = connect_loopback(listener);                        // or your own QP: connection::adopt
    auto pool = memory_pool::create(a.qp()->pd());
    local_mr exposed = pool->allocate(4096);                         // what b's side exposes
    std::uint64_t old = sync_wait(demo(a, pool, exposed.remote()));
    std::printf("peer memory now reads \"%s\"; fetch_add saw %llu\n", reinterpret_cast<char*>(exposed.data()),
                static_cast<unsigned long long>(old));
} catch (const std::exception& e) {
    std::fprintf(stderr, "quick_start: %s\n", e.what());
    return 1;
}
