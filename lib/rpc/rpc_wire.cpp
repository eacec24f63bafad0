// rpc_wire: encoding and checking the header of cordma::rpc's frames. A
// peer controls every byte decode() reads: it rejects, with a reason, all
// that encode() could not have written.
#include "rpc/rpc_wire.hpp"

#include "wire/byte_codec.hpp"

namespace cordma::detail::rpc_wire {
namespace {

constexpr std::uint8_t last_type = static_cast<std::uint8_t>(frame::pad);

}  // namespace

void encode(const header& h, std::span<std::byte, header_size> out) noexcept {
    byte_writer w(out);
    w.u16(magic);
    w.u8(version);
    w.u8(static_cast<std::uint8_t>(h.type));
    w.u32(h.credits);
    w.u64(h.id);
    w.u32(h.code);
    w.zeros(4);
    w.u64(h.size);
    w.u64(h.addr);
    w.u32(h.rkey);
    w.zeros(4);
}

std::optional<header> decode(std::span<const std::byte> bytes, std::string& why) {
    if (bytes.size() < header_size) {
        why = "a frame of " + std::to_string(bytes.size()) + " bytes, shorter than the " +
              std::to_string(header_size) + "-byte header";
        return std::nullopt;
    }
    byte_reader r(bytes.first(header_size));
    if (r.u16() != magic) {
        why = "a frame without cordma::rpc's magic number (not a cordma rpc peer?)";
        return std::nullopt;
    }
    if (auto v = r.u8(); v != version) {
        why = "a frame of protocol version " + std::to_string(v) + " (this side speaks " + std::to_string(version) +
              ")";
        return std::nullopt;
    }
    auto type = r.u8();
    if (type < 1 || type > last_type) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    header h;
    h.type = static_cast<frame>(type);
    h.credits = r.u32();
    h.id = r.u64();
    h.code = r.u32();
    std::uint32_t reserved = r.u32();
    h.size = r.u64();
    h.addr = r.u64();
    h.rkey = r.u32();
    if (reserved != 0 || r.u32() != 0) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    std::size_t payload = bytes.size() - header_size;
    if (carries_payload(h.type) ? h.size != payload : payload != 0) {
        why = std::string("a ") + name(h.type) + " frame of " + std::to_string(bytes.size()) +
              " bytes whose header says " + std::to_string(carries_payload(h.type) ? h.size : 0) +
              " bytes of payload";
        return std::nullopt;
    }
    bool rendezvous = h.type == frame::request_rts || h.type == frame::response_rts;
    if (rendezvous && h.size == 0) {
        why = std::string("a ") + name(h.type) + " frame for 0 bytes (an empty payload goes inline)";
        return std::nullopt;
    }
    // A done frame may answer a grow: addr is then a receive number.
    if (!rendezvous && h.type != frame::hello && ((h.addr != 0 && h.type != frame::done) || h.rkey != 0)) {
        why = std::string("a ") + name(h.type) + " frame with an address or key (only rendezvous frames have one)";
        return std::nullopt;
    }
    return h;
}

const char* name(frame type) noexcept {
    switch (type) {
    case frame::hello: return "hello";
    case frame::request: return "request";
    case frame::request_rts: return "request_rts";
    case frame::response: return "response";
    case frame::response_rts: return "response_rts";
    case frame::done: return "done";
    case frame::credit: return "credit";
    case frame::release: return "release";
    case frame::grow: return "grow";
    case frame::shrink: return "shrink";
    case frame::pad: return "pad";
    }
    return "unknown";
}

}  // namespace cordma::detail::rpc_wire
