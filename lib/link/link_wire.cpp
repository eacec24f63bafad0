#include "link/link_wire.hpp"

#include <cstring>

#include "link/little_endian.hpp"

namespace cordma::detail::link_wire {
namespace {

using little_endian::get;
using little_endian::put;

}  // namespace

void encode(const header& h, std::span<std::byte, header_size> out) noexcept {
    std::byte* p = out.data();
    std::memset(p, 0, header_size);
    put<std::uint16_t>(p + 0, magic);
    put<std::uint8_t>(p + 2, static_cast<std::uint8_t>(h.type));
    put<std::uint8_t>(p + 3, static_cast<std::uint8_t>(h.op));
    put<std::uint16_t>(p + 4, h.step);
    put<std::uint32_t>(p + 8, h.seq);
    put<std::uint32_t>(p + 12, h.acked);
    put<std::uint32_t>(p + 16, h.root);
    put<std::uint32_t>(p + 20, h.extra);
    put<std::uint64_t>(p + 24, h.size);
    put<std::uint64_t>(p + 32, h.addr);
    put<std::uint32_t>(p + 40, h.rkey);
}

std::optional<header> decode(std::span<const std::byte> bytes, std::string& why) {
    if (bytes.size() < header_size) {
        why = "a frame of " + std::to_string(bytes.size()) + " bytes, shorter than the " +
              std::to_string(header_size) + "-byte header";
        return std::nullopt;
    }
    const std::byte* p = bytes.data();
    if (get<std::uint16_t>(p) != magic) {
        why = "a frame without the link's magic number (not a cordma peer?)";
        return std::nullopt;
    }
    header h;
    auto type = get<std::uint8_t>(p + 2);
    if (type < 1 || type > 7) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    h.type = static_cast<frame>(type);
    auto op = get<std::uint8_t>(p + 3);
    if (op > static_cast<std::uint8_t>(link_wire::op::stream)) {
        why = "a frame of unknown op " + std::to_string(op);
        return std::nullopt;
    }
    h.op = static_cast<link_wire::op>(op);
    // encode writes zeros there: a frame with anything else is not one
    // cordma wrote, and refusing it keeps those bytes free for a later
    // version (as rpc_wire and the agent's messages do).
    if (get<std::uint16_t>(p + 6) != 0 || get<std::uint32_t>(p + 44) != 0) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    h.step = get<std::uint16_t>(p + 4);
    h.seq = get<std::uint32_t>(p + 8);
    h.acked = get<std::uint32_t>(p + 12);
    h.root = get<std::uint32_t>(p + 16);
    h.extra = get<std::uint32_t>(p + 20);
    h.size = get<std::uint64_t>(p + 24);
    h.addr = get<std::uint64_t>(p + 32);
    h.rkey = get<std::uint32_t>(p + 40);
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
    }
    return "?";
}

}  // namespace cordma::detail::link_wire
