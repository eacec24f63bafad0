#include "link/link_wire.hpp"

#include "wire/byte_codec.hpp"

namespace cordma::detail::link_wire {

void encode(const header& h, std::span<std::byte, header_size> out) noexcept {
    byte_writer w(out);
    w.u16(magic);
    w.u8(static_cast<std::uint8_t>(h.type));
    w.u8(static_cast<std::uint8_t>(h.op));
    w.u16(h.step);
    w.zeros(2);
    w.u32(h.seq);
    w.u32(h.acked);
    w.u32(h.root);
    w.u32(h.extra);
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
        why = "a frame without the link's magic number (not a cordma peer?)";
        return std::nullopt;
    }
    header h;
    auto type = r.u8();
    if (type < 1 || type > last_frame) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    h.type = static_cast<frame>(type);
    auto op = r.u8();
    if (op > static_cast<std::uint8_t>(link_wire::op::stream)) {
        why = "a frame of unknown op " + std::to_string(op);
        return std::nullopt;
    }
    h.op = static_cast<link_wire::op>(op);
    h.step = r.u16();
    std::uint16_t reserved = r.u16();
    h.seq = r.u32();
    h.acked = r.u32();
    h.root = r.u32();
    h.extra = r.u32();
    h.size = r.u64();
    h.addr = r.u64();
    h.rkey = r.u32();
    // encode writes zeros there: a frame with anything else is not one
    // cordma wrote, and refusing it keeps those bytes free for a later
    // version (as rpc_wire and the agent's messages do).
    if (reserved != 0 || r.u32() != 0) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    std::size_t payload = bytes.size() - header_size;
    bool carries = h.type == frame::data || h.type == frame::abort;
    if (carries ? h.size != payload : payload != 0) {
        why = std::string("a ") + name(h.type) + " frame of " + std::to_string(bytes.size()) +
              " bytes whose header says " + std::to_string(carries ? h.size : 0) + " bytes of payload";
        return std::nullopt;
    }
    return h;
}

std::string name(link_wire::op o) {
    switch (o) {
    case link_wire::op::none: return "none";
    case link_wire::op::message: return "message";
    case link_wire::op::stream: return "stream";
    }
    return "op " + std::to_string(static_cast<unsigned>(o));
}

const char* name(frame type) noexcept {
    switch (type) {
    case frame::hello: return "hello";
    case frame::data: return "data";
    case frame::rts: return "rts";
    case frame::fin: return "fin";
    case frame::credit: return "credit";
    case frame::abort: return "abort";
    case frame::ping: return "ping";
    case frame::grow: return "grow";
    case frame::room: return "room";
    case frame::shrink: return "shrink";
    case frame::pad: return "pad";
    }
    return "?";
}

}  // namespace cordma::detail::link_wire
