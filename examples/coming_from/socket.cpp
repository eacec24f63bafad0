// coming_from_socket: the classic exchange of a socket-like communicator
// (rdmacomm's shape: Serve, Accept, Connect, Read, Write, Close), written
// with cordma's blocking stream (<cordma/blocking_stream.hpp>). The client
// connects and writes an 18-byte message; the server reads it with a
// 40-byte buffer (a short read: 18 bytes), checks it and replies; the
// client reads the reply, checks it and sees the end of the stream. Both
// exit 1 on any byte out of place.
//
// Usage: coming_from_socket server ADDR:PORT    (PORT 0: any free port)
//        coming_from_socket client ADDR:PORT
//
// ADDR is an address on an RDMA device (inside tools/rxe-vm: $RXE_VM_ADDR),
// PORT an rdma_cm port. Once it listens the server prints "server:
// listening on ADDR:PORT"; examples/coming_from/socket.sh starts the client
// when that line comes.
//
// docs/coming-from/socket.md shows the regions between "// doc:NAME begin"
// and "// doc:NAME end" beside the communicator's code; the unit test
// coming_from_docs fails if the page and this file differ.

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include <cordma/blocking_stream.hpp>
#include <cordma/builder.hpp>

using namespace cordma;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view request = "Hello from client!";
constexpr std::string_view reply = "Hello from server! Got your 18 bytes.";
static_assert(request.size() == 18 && reply.size() == 37);

/// Says what differs, and fails the program.
int differs(const char* side, const char* what, std::string_view got, std::string_view expected) {
    std::fprintf(stderr, "%s: %s: got %zu bytes \"%.*s\", expected %zu bytes \"%.*s\"\n", side, what, got.size(),
                 static_cast<int>(got.size()), got.data(), expected.size(), static_cast<int>(expected.size()),
                 expected.data());
    return 1;
}

int server(builder b, const std::string& address) {
    // doc:server begin
    blocking_stream_listener listener = blocking_stream::serve(b, address);  // Serve
    std::printf("server: listening on %s\n", listener.address().c_str());
    blocking_stream s = listener.accept(30s);  // Accept (no client in 30 s: timed_out_error)
    s.set_timeout(30s);                        // every read and write from now on

    char buffer[40];
    std::size_t n = s.read(buffer, sizeof buffer);  // Read: what has arrived, here 18 of 40 bytes
    if (std::string_view(buffer, n) != request)
        return differs("server", "request", std::string_view(buffer, n), request);

    s.write(reply);  // Write: every byte, or an exception
    s.close();       // Close: the client reads the reply, then 0
    // doc:server end
    std::printf("server: %s sent %zu bytes into a %zu-byte buffer; replied\n", s.peer().c_str(), n, sizeof buffer);
    return 0;
}

int client(builder b, const std::string& address) {
    // doc:client begin
    blocking_stream s = blocking_stream::connect(b, address, {}, 10s);  // Connect
    s.set_timeout(30s);
    s.write(request);  // Write: 18 bytes

    std::string answer;
    s.read_exactly(answer, reply.size());  // the length is known: all of it, however it comes
    if (answer != reply)
        return differs("client", "reply", answer, reply);

    char rest[40];
    std::size_t after = s.read(rest, sizeof rest);  // 0: the server closed, nothing more
    if (after != 0)
        return differs("client", "end of stream", std::string_view(rest, after), "");
    s.close();  // Close
    // doc:client end
    std::printf("client: the server replied \"%s\"\n", answer.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) try {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe (run.sh reads it)
    std::string_view mode = argc == 3 ? argv[1] : "";
    if (mode != "server" && mode != "client") {
        std::fprintf(stderr, "usage: coming_from_socket server ADDR:PORT    (PORT 0: any free port)\n"
                             "       coming_from_socket client ADDR:PORT\n");
        return 2;
    }
    builder b;  // the first RDMA device with an active port, default settings
    return mode == "server" ? server(b, argv[2]) : client(b, argv[2]);
} catch (const std::exception& e) {
    std::fprintf(stderr, "coming_from_socket %s: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 1;
}
