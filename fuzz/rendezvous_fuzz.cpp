// libFuzzer target for the torchrun-style rendezvous's frames
// (lib/group/bootstrap/rendezvous_message.hpp).
//
// A peer controls every byte these decoders read: rank 0's server reads
// the header and publish of whatever connects to its port
// (rendezvous_server.cpp), and every other rank reads the status, list or
// refusal frames of whatever answers at MASTER_ADDR:MASTER_PORT
// (rendezvous_bootstrap.cpp). So they must never read out of bounds,
// allocate without bound, or fail with anything but std::invalid_argument
// naming the field (both callers catch that, and only that, and drop the
// peer with its text). Beyond not crashing, whatever they accept must
// keep the format's rules (a world size of 1..65536, a rank below it,
// endpoints of 1..255 printable bytes, a refusal of at most 1024) and
// must be exactly what the encoders write: re-encoding a decoded frame
// gives back its bytes, header included, so no bit a decoder ignores (a
// reserved byte, a status bit past the world size) slips past. Any breach
// aborts, which libFuzzer reports as a crash with the input saved.
//
// The input is what arrives on the socket: frame after frame, each a
// header and then as many payload bytes as its length says, decoded until
// one is refused or the bytes run out (the peer is dropped, or the
// connection ended inside a frame). Each header and payload is copied into
// a buffer of exactly its size, so that AddressSanitizer sees a read past
// it.
//
// Built and run by fuzz/run-fuzz --target rendezvous (the
// `rendezvous_fuzz` test).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "group/bootstrap/rendezvous_message.hpp"

namespace cd = cordma::detail;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "rendezvous_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

bool printable(const std::string& s, std::size_t min, std::size_t max) {
    if (s.size() < min || s.size() > max)
        return false;
    for (char c : s)
        if (c < 0x20 || c > 0x7e)
            return false;
    return true;
}

void check_world_size(std::size_t n, const char* frame) {
    if (n == 0 || n > cd::rendezvous_max_world_size)
        die("decode accepted a world size outside 1..65536", std::string(frame) + ", " + std::to_string(n));
}

// Decodes the payload of a frame of `type`, checks it, and re-encodes it
// (a whole frame) into `encoded`. A refusal is the decoder's throw.
void decode_payload(cd::rendezvous_type type, std::span<const std::uint8_t> payload,
                    std::vector<std::uint8_t>& encoded) {
    switch (type) {
    case cd::rendezvous_type::publish: {
        cd::rendezvous_publish p = cd::decode_rendezvous_publish(payload);
        check_world_size(p.world_size, "publish");
        if (p.rank >= p.world_size)
            die("decode accepted a publish whose rank is not below its world size",
                std::to_string(p.rank) + " of " + std::to_string(p.world_size));
        if (!printable(p.endpoint, 1, cd::rendezvous_max_endpoint))
            die("decode accepted a publish whose endpoint is not 1..255 printable bytes");
        try {
            encoded = cd::encode_rendezvous_publish(p);
        } catch (const std::exception& e) {
            die("decode accepted a publish that encode refuses", e.what());
        }
        return;
    }
    case cd::rendezvous_type::status: {
        std::vector<bool> s = cd::decode_rendezvous_status(payload);
        check_world_size(s.size(), "status");
        encoded = cd::encode_rendezvous_status(s);
        return;
    }
    case cd::rendezvous_type::list: {
        std::vector<std::string> l = cd::decode_rendezvous_list(payload);
        check_world_size(l.size(), "list");
        for (const auto& e : l)
            if (!printable(e, 1, cd::rendezvous_max_endpoint))
                die("decode accepted a list with an endpoint that is not 1..255 printable bytes");
        encoded = cd::encode_rendezvous_list(l);
        return;
    }
    case cd::rendezvous_type::refused: {
        std::string why = cd::decode_rendezvous_refused(payload);
        if (!printable(why, 0, cd::rendezvous_max_refusal))
            die("decode accepted a refusal that is not 0..1024 printable bytes");
        encoded = cd::encode_rendezvous_refused(why);
        return;
    }
    }
    die("decode_rendezvous_header accepted an unknown type", std::to_string(static_cast<int>(type)));
}

bool named(const std::invalid_argument& e) {
    return std::strncmp(e.what(), "rendezvous frame: field '", 25) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::size_t at = 0;
    while (size - at >= cd::rendezvous_header_size) {
        auto head = std::make_unique<std::uint8_t[]>(cd::rendezvous_header_size);
        std::memcpy(head.get(), data + at, cd::rendezvous_header_size);
        cd::rendezvous_header h;
        try {
            h = cd::decode_rendezvous_header(
                std::span<const std::uint8_t, cd::rendezvous_header_size>(head.get(), cd::rendezvous_header_size));
        } catch (const std::invalid_argument& e) {
            if (!named(e))
                die("decode_rendezvous_header refused a header without naming the field", e.what());
            return 0;
        } catch (const std::exception& e) {
            die("decode_rendezvous_header threw something other than std::invalid_argument", e.what());
        }
        // The callers allocate this much before reading the payload.
        if (h.length > cd::rendezvous_max_payload(h.type))
            die("decode_rendezvous_header accepted a length over its type's limit", std::to_string(h.length));
        at += cd::rendezvous_header_size;
        if (size - at < h.length)
            return 0;  // the connection ended inside the frame

        auto payload = std::make_unique<std::uint8_t[]>(h.length);
        if (h.length != 0)
            std::memcpy(payload.get(), data + at, h.length);
        std::vector<std::uint8_t> encoded;
        try {
            decode_payload(h.type, std::span<const std::uint8_t>(payload.get(), h.length), encoded);
        } catch (const std::invalid_argument& e) {
            if (!named(e))
                die("a payload decoder refused a payload without naming the field", e.what());
            return 0;
        } catch (const std::exception& e) {
            die("a payload decoder threw something other than std::invalid_argument", e.what());
        }

        std::size_t frame = cd::rendezvous_header_size + h.length;
        if (encoded.size() != frame ||
            std::memcmp(encoded.data(), data + at - cd::rendezvous_header_size, frame) != 0)
            die("re-encoding a decoded frame changed its bytes",
                "type " + std::to_string(static_cast<int>(h.type)) + ", " + std::to_string(frame) + " bytes");
        at += h.length;
    }
    return 0;
}
