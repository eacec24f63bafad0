// libFuzzer target for the link's frame header (lib/link/link_wire.hpp).
//
// A peer controls every byte link_wire::decode reads: each SEND that lands
// in a link's receives, which carries every frame of cordma::group's ranks,
// of cordma::stream and of the C API's peers, and the hellos with which
// those links start (lib/link/link_hello.cpp, lib/group/group_formation.cpp).
// So decode must never read out of bounds or fail with anything but a
// reason. Beyond not crashing, whatever decode accepts must be what encode
// writes, byte for byte: the header decode hands back re-encodes to the
// input's first 48 bytes, so no bit decode ignores (a reserved word, a
// stray type) slips past it; and the frame's length agrees with the
// header, since peer_link, the stream and the C API copy `size` bytes from
// after the header of a data frame, and peer_link reads an abort's reason
// the same way. `why` is the one way a caller learns what was wrong, so it
// is empty on success and never empty on failure. Any breach aborts, which
// libFuzzer reports as a crash with the input saved.
//
// Built and run by fuzz/run-fuzz --target link_wire (the `link_wire_fuzz`
// test).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>

#include "link/link_wire.hpp"

namespace wire = cordma::detail::link_wire;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "link_wire_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
    std::string why;
    std::optional<wire::header> h;
    try {
        h = wire::decode(in, why);
    } catch (const std::exception& e) {
        // peer_link's dispatcher would take a throw for a lost connection,
        // and the hello exchanges would report it as something else than
        // the peer's bad frame.
        die("decode threw", e.what());
    }

    if (!h) {
        if (why.empty())
            die("decode refused a frame without saying why");
        return 0;
    }
    if (!why.empty())
        die("decode accepted a frame but set a reason", why);
    // A traced data or rts frame's header runs on through its trace id.
    std::size_t header = wire::header_length(*h);
    if (!h->trace.empty() && h->type != wire::frame::data && h->type != wire::frame::rts)
        die("decode accepted a trace id on a frame that is not data or rts", wire::name(h->type));
    if (size < header)
        die("decode accepted a frame shorter than its header", std::to_string(size) + " bytes");

    // name() answers "?" only for a type outside the enum; an op is the
    // link's (none, message, stream) or in the range its owner numbers.
    bool known_op = h->op == wire::op::none || h->op == wire::op::message || h->op == wire::op::stream ||
                    wire::is_module_op(h->op);
    if (std::strcmp(wire::name(h->type), "?") == 0 || !known_op)
        die("decode accepted an unknown frame type or op",
            std::to_string(static_cast<int>(h->type)) + ", " + std::to_string(static_cast<int>(h->op)));

    std::byte out[wire::max_header_size];
    if (wire::encode(*h, std::span<std::byte>(out)) != header)
        die("encode wrote a header of another length than header_length", wire::name(h->type));
    if (std::memcmp(out, data, header) != 0)
        die("re-encoding the decoded header changed its bytes", wire::name(h->type));

    std::size_t payload = size - header;
    bool carries = h->type == wire::frame::data || h->type == wire::frame::abort;
    if (carries ? h->size != payload : payload != 0)
        die("decode accepted a frame whose length disagrees with its header",
            std::string(wire::name(h->type)) + ", size " + std::to_string(h->size) + ", " + std::to_string(payload) +
                " bytes after the header");
    return 0;
}
