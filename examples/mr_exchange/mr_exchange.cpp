// mr_exchange: two processes hand each other memory through cordma's agent.
//
//   mr_exchange server ADDRESS    accept one client, then:
//     1. receive_local_mr: get back the region the client requested and wrote,
//        and print what it wrote;
//     2. send_local_mr: grant the client one of our regions to read.
//   mr_exchange client ADDRESS
//     1. request_remote_mr: ask the server for 4 KiB of its memory, RDMA WRITE
//        a message into part of it, send_remote_mr: hand it back;
//     2. receive_remote_mr: get the server's region, RDMA READ it, print it.
//
// ADDRESS is host:port on an RDMA device (e.g. 10.77.0.1:7472 inside
// tools/rxe-vm; the server may use port 0 for any free one, and prints the
// address it listens on). The server gives up if no client comes within a
// minute. examples/mr_exchange/run.sh runs both, starting the client once
// the server says it is listening.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;

namespace {

// Both sides check what arrived, so run.sh (and the test that runs it) fails
// if a byte went astray.
constexpr char client_text[] = "hello from the client, by RDMA WRITE";
constexpr char server_text[] = "the server's own memory, read by the client";

void expect(const char* got, const char* wanted, const char* who) {
    if (std::strcmp(got, wanted) != 0)
        throw std::runtime_error(std::string(who) + ": expected \"" + wanted + "\", got \"" + got + "\"");
}

// How long the server waits for its client before giving up.
constexpr auto accept_limit = std::chrono::seconds(60);

task<void> serve(builder& b, listener& l, std::stop_token give_up) {
    connection conn;
    try {
        conn = co_await l.accept(give_up);
    } catch (const operation_cancelled&) {
        throw std::runtime_error("no client connected within " + std::to_string(accept_limit.count()) +
                                 " s; is the client pointed at " + l.address() + "?");
    }
    std::printf("server: client %s connected\n", conn.peer().c_str());

    // 1. The client wrote into memory it asked us for, then handed it back.
    local_mr returned = co_await conn.receive_local_mr();
    std::printf("server: got my %zu-byte region back; at offset 256 the client wrote: \"%s\"\n", returned.size(),
                reinterpret_cast<const char*>(returned.data() + 256));
    expect(reinterpret_cast<const char*>(returned.data() + 256), client_text, "server");

    // 2. Now grant the client a region of ours to read.
    local_mr mine = b.pool()->allocate(128);
    std::snprintf(reinterpret_cast<char*>(mine.data()), 128, "%s", server_text);
    co_await conn.send_local_mr(mine.all(), std::chrono::seconds(10), access_flags::remote_read);
    std::printf("server: granted the client read access to 128 bytes of mine\n");
    // The client closes when it has read it.
    local_mr wait_for_close = b.pool()->allocate(8);
    try {
        co_await conn.recv(wait_for_close.all());
    } catch (const std::system_error&) {
    }
    std::printf("server: client disconnected, done\n");
}

task<void> client(builder& b, std::string address) {
    connection conn = co_await b.connect(address);
    std::printf("client: connected to %s\n", conn.peer().c_str());

    // 1. Ask for memory, write into it, hand it back.
    remote_mr region = co_await conn.request_remote_mr(4096);
    std::printf("client: the server granted %llu bytes (rkey 0x%x)\n",
                static_cast<unsigned long long>(region.size()), region.all().rkey);
    local_mr message = b.pool()->allocate(64);
    std::memcpy(message.data(), client_text, sizeof client_text);
    co_await conn.write(message.slice(0, sizeof client_text), region.slice(256, sizeof client_text));
    co_await conn.send_remote_mr(std::move(region));
    std::printf("client: wrote %zu bytes at offset 256 and handed the region back\n", sizeof client_text);

    // 2. Read a region the server grants us.
    remote_mr theirs = co_await conn.receive_remote_mr();
    local_mr into = b.pool()->allocate(theirs.size());
    co_await conn.read(into.all(), theirs.all());
    std::printf("client: read the server's region: \"%s\"\n", reinterpret_cast<const char*>(into.data()));
    expect(reinterpret_cast<const char*>(into.data()), server_text, "client");
    co_await conn.close();
}

}  // namespace

int main(int argc, char** argv) try {
    // Line by line, also into a pipe: run.sh starts the client the moment
    // it reads the server's "listening on" line.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc != 3 || (std::string(argv[1]) != "server" && std::string(argv[1]) != "client")) {
        std::fprintf(stderr, "usage: mr_exchange server|client HOST:PORT\n");
        return 2;
    }
    builder b;
    if (std::string(argv[1]) == "server") {
        listener l = b.listen(argv[2]);
        std::printf("server: listening on %s\n", l.address().c_str());
        // A client that never comes: the watchdog stops `give_up` after
        // accept_limit, and accept throws operation_cancelled. When serve()
        // ends first, the jthread's destructor wakes and joins it.
        std::stop_source give_up;
        std::jthread watchdog([&give_up](std::stop_token served) {
            std::mutex mutex;
            std::condition_variable_any wake;
            std::unique_lock lock(mutex);
            wake.wait_for(lock, served, accept_limit, [] { return false; });
            if (!served.stop_requested())
                give_up.request_stop();
        });
        sync_wait(serve(b, l, give_up.get_token()));
    } else {
        sync_wait(client(b, argv[2]));
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "mr_exchange %s: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 1;
}
