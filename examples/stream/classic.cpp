// stream_classic: the classic socket server and client, over RDMA with
// cordma::stream (docs/stream.md). The server accepts one client, reads its
// 40-byte request, writes a reply (the request reversed) and closes. The
// client connects, writes the request, reads the reply until the end of the
// stream and checks it.
//
// Usage: stream_classic server ADDR:PORT    (PORT 0: any free port)
//        stream_classic client ADDR:PORT
//
// ADDR is an address on an RDMA device (inside tools/rxe-vm: $RXE_VM_ADDR),
// PORT an rdma_cm port, not a TCP one. Once it listens the server prints
// "server: listening on ADDR:PORT" (the port it got);
// examples/stream/run.sh starts the client when that line comes.
//
// A TCP-style communicator's calls, and what they are here:
//   Serve(addr)      stream::serve(builder, "addr:port")     listening when it returns
//   Accept()         co_await listener.accept()
//   Connect(addr)    co_await stream::connect(builder, "addr:port")
//   Read(buf, n)     co_await s.read(buf)                    what has arrived, 1 to n bytes; 0 at end of stream
//                    co_await s.read_exactly(buf)            all n bytes, or an error: when the length is known
//   Write(buf, n)    co_await s.write(buf)                   every byte, or an error
//   Close()          co_await s.close()                      the peer reads what was written, then 0
// Each co_await resumes on the builder's event listener thread; main waits
// for the whole coroutine with sync_wait. The same calls blocking, for
// plain threads: cordma::blocking_stream (examples/coming_from/socket.cpp).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include <cordma/builder.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;

namespace {

constexpr std::string_view request_text = "Hello, server! This is a 40-byte request";
static_assert(request_text.size() == 40);

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text)); }

std::string text_of(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

task<void> server(stream_listener listener) {
    stream s = co_await listener.accept();  // Accept()
    std::array<std::byte, 40> request;
    co_await s.read_exactly(request);  // the request is known to be 40 bytes: all 40, however they come
    std::printf("server: %s sent \"%s\"\n", s.peer().c_str(), text_of(request).c_str());
    std::array<std::byte, 40> reply;
    std::reverse_copy(request.begin(), request.end(), reply.begin());
    co_await s.write(reply);  // Write(buf, 40)
    co_await s.close();       // Close(): the client reads the reply, then 0
}

task<bool> client(builder b, std::string address) {
    stream s = co_await stream::connect(b, address);  // Connect()
    co_await s.write(bytes_of(request_text));          // Write(buf, 40)
    // Read until the end of the stream: each read returns what has arrived
    // (at least a byte), and 0 once the server has closed. Like TCP, a
    // stream keeps no message boundaries: the reply may come in pieces.
    std::string reply;
    std::array<std::byte, 64> buffer;
    for (;;) {
        std::size_t n = co_await s.read(buffer);  // Read(buf, 64)
        if (n == 0)
            break;
        reply += text_of(std::span(buffer).first(n));
    }
    co_await s.close();  // Close()
    std::printf("client: the server replied \"%s\"\n", reply.c_str());
    co_return reply == std::string(request_text.rbegin(), request_text.rend());
}

}  // namespace

int main(int argc, char** argv) try {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe (run.sh reads it)
    std::string_view mode = argc == 3 ? argv[1] : "";
    if (mode != "server" && mode != "client") {
        std::fprintf(stderr, "usage: stream_classic server ADDR:PORT    (PORT 0: any free port)\n"
                             "       stream_classic client ADDR:PORT\n");
        return 2;
    }
    builder b;  // the first RDMA device with an active port, default settings
    if (mode == "server") {
        stream_listener listener = stream::serve(b, argv[2]);  // Serve()
        std::printf("server: listening on %s\n", listener.address().c_str());
        sync_wait(server(listener));
        return 0;
    }
    if (!sync_wait(client(b, argv[2]))) {
        std::fprintf(stderr, "client: that is not the request reversed\n");
        return 1;
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "stream_classic %s: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 1;
}
