// libFuzzer target for cordma::rpc's frame header (lib/rpc/rpc_wire.hpp).
//
// A peer controls every byte rpc_wire::decode reads: each SEND that lands in
// a server's shared receive queue or a client's receive queue, and the
// hello in the private data of a connect request or accept. So decode must
// never read out of bounds or fail with anything but a reason. Beyond not
// crashing, whatever decode accepts must be what encode writes, byte for
// byte: the header decode hands back re-encodes to the input's first 16
// (an inline request or response) or 48 bytes (16 more, the trace id, for
// a traced request), so no bit decode ignores (a reserved word, a stray version) slips
// past it; and the frame's length agrees with the header, since the server
// and client take the payload to be everything after the header. `why` is
// the one way a caller learns what was wrong, so it is empty on success
// and never empty on failure. Any breach aborts, which libFuzzer reports as
// a crash with the input saved.
//
// Built and run by fuzz/run-fuzz --target rpc_wire (the `rpc_wire_fuzz`
// test).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "rpc/rpc_wire.hpp"

namespace wire = cordma::detail::rpc_wire;

namespace {

[[noreturn]] void die(const char* where, const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "rpc_wire_fuzz: %s: %s%s%s\n", where, what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

// Decodes `in` as a caller does and holds the result to decode's contract.
// `where` names the caller being imitated in the abort message.
void check(std::span<const std::byte> in, const char* where) {
    std::string why;
    std::optional<wire::header> h;
    try {
        h = wire::decode(in, why);
    } catch (const std::exception& e) {
        // The callers do not catch: a throw would take down the server's
        // event loop (or the client) over one peer's bad bytes.
        die(where, "decode threw", e.what());
    }

    if (!h) {
        if (why.empty())
            die(where, "decode refused a frame without saying why");
        return;
    }
    if (!why.empty())
        die(where, "decode accepted a frame but set a reason", why);

    // A traced request's header runs on through its trace id.
    std::size_t header = wire::header_length(*h);
    if (in.size() < header)
        die(where, "decode accepted a frame shorter than its header", std::to_string(in.size()) + " bytes");
    if (h->type != wire::frame::hello && h->id > wire::largest_id)
        die(where, "decode accepted a call id over 32 bits", std::to_string(h->id));
    if (!h->trace.empty() && h->type != wire::frame::request && h->type != wire::frame::request_rts)
        die(where, "decode accepted a trace id on a frame that is not a request", wire::name(h->type));
    std::byte out[wire::max_header_size];
    if (wire::encode(*h, std::span<std::byte>(out)) != header)
        die(where, "encode wrote a header of another length than header_length", wire::name(h->type));
    if (std::memcmp(out, in.data(), header) != 0)
        die(where, "re-encoding the decoded header changed its bytes", wire::name(h->type));

    std::size_t payload = in.size() - header;
    if (wire::carries_payload(h->type) ? h->size != payload : payload != 0)
        die(where, "decode accepted a frame whose length disagrees with its header",
            std::string(wire::name(h->type)) + ", size " + std::to_string(h->size) + ", " +
                std::to_string(payload) + " bytes after the header");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // A frame as it arrives in a receive buffer: all of the bytes.
    check(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), "frame");

    // A hello as the server and client read it from rdma_cm's private data:
    // decode(data.first(48)) whenever at least 48 bytes came. Copied into a
    // buffer of exactly 48 bytes so that AddressSanitizer sees a read past
    // the slice (which it would not inside the larger input). An input of
    // exactly 48 bytes was that slice already.
    if (size > wire::header_size) {
        auto hello = std::make_unique<std::byte[]>(wire::header_size);
        std::memcpy(hello.get(), data, wire::header_size);
        check(std::span<const std::byte>(hello.get(), wire::header_size), "hello");
    }
    return 0;
}
