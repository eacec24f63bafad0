#include "link/link_wire.hpp"

#include "wire/byte_codec.hpp"

namespace cordma::detail::link_wire {

std::size_t encode(const header& h, std::span<std::byte> out) noexcept {
    byte_writer w(out);
    bool traced = !h.trace.empty() && (h.type == frame::data || h.type == frame::rts);
    w.u16(magic);
    w.u8(static_cast<std::uint8_t>(static_cast<std::uint8_t>(h.type) | (traced ? traced_flag : 0)));
    w.u8(static_cast<std::uint8_t>(h.op));
    w.u16(h.step);
    w.u16(h.type == frame::hello ? version : 0);
    w.u32(h.seq);
    w.u32(h.acked);
    w.u32(h.root);
    w.u32(h.extra);
    std::size_t keys = h.type == frame::rts && h.rails > 1 ? h.rails - 1u : 0;
    if (h.type != frame::data) {
        w.u64(h.size);
        w.u64(h.addr);
        w.u32(h.rkey);
        w.u32(static_cast<std::uint32_t>(keys));
    }
    if (traced)
        w.bytes(h.trace.bytes());
    for (std::size_t i = 0; i < keys; ++i)
        w.u32(h.rail_rkeys[i]);
    return w.written();
}

std::optional<header> decode(std::span<const std::byte> bytes, std::string& why) {
    if (bytes.size() < data_header_size) {
        why = "a frame of " + std::to_string(bytes.size()) + " bytes, shorter than the shortest (" +
              std::to_string(data_header_size) + "-byte) header";
        return std::nullopt;
    }
    byte_reader r(bytes.first(data_header_size));
    if (r.u16() != magic) {
        why = "a frame without the link's magic number (not a cordma peer?)";
        return std::nullopt;
    }
    header h;
    auto type = r.u8();
    bool traced = (type & traced_flag) != 0;
    type &= static_cast<std::uint8_t>(~traced_flag);
    if (type < 1 || type > last_frame) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    h.type = static_cast<frame>(type);
    std::size_t length = header_length(h.type);
    if (traced && h.type != frame::data && h.type != frame::rts) {
        why = std::string("a ") + name(h.type) + " frame marked traced (only data and rts frames carry a trace id)";
        return std::nullopt;
    }
    std::size_t trace_bytes = traced ? trace_size : 0;
    if (bytes.size() < length + trace_bytes) {
        why = std::string("a ") + (traced ? "traced " : "") + name(h.type) + " frame of " +
              std::to_string(bytes.size()) + " bytes, shorter than its " + std::to_string(length) + "-byte header" +
              (traced ? " and trace id" : "");
        return std::nullopt;
    }
    if (traced) {
        h.trace = trace_id(byte_reader(bytes.subspan(length)).array<trace_size>());
        if (h.trace.empty()) {
            why = std::string("a traced ") + name(h.type) + " frame whose trace id is all zero";
            return std::nullopt;
        }
    }
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
    if (h.type == frame::hello) {
        // A hello's reserved bytes are the version: a v1 peer (48-byte data
        // headers) wrote 0 there.
        if (reserved != version) {
            why = "a hello of link protocol " + std::to_string(reserved == 0 ? 1 : reserved) + ", this side speaks " +
                  std::to_string(version) + " (the two ends run different cordma versions: use the same on both)";
            return std::nullopt;
        }
        reserved = 0;
    }
    if (h.type == frame::data) {
        if (reserved != 0) {
            why = "a data frame with its reserved bytes set";
            return std::nullopt;
        }
        h.size = bytes.size() - data_header_size - trace_bytes;
        return h;
    }
    byte_reader rest(bytes.subspan(data_header_size, header_size - data_header_size));
    h.size = rest.u64();
    h.addr = rest.u64();
    h.rkey = rest.u32();
    // encode writes zeros there (an rts: its number of rail keys): a frame
    // with anything else is not one cordma wrote, and refusing it keeps
    // those bytes free for a later version (as rpc_wire and the agent's
    // messages do).
    std::uint32_t keys = rest.u32();
    if (reserved != 0 || (h.type != frame::rts && keys != 0)) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    std::size_t payload = bytes.size() - header_size - trace_bytes;
    if (keys != 0) {
        if (keys > max_rail_keys || payload != 4 * keys) {
            why = "an rts frame naming " + std::to_string(keys) + " rail key(s) (at most " +
                  std::to_string(max_rail_keys) + ") with " + std::to_string(payload) + " bytes after its header";
            return std::nullopt;
        }
        byte_reader key_reader(bytes.subspan(header_size + trace_bytes));
        for (std::uint32_t i = 0; i < keys; ++i)
            h.rail_rkeys[i] = key_reader.u32();
        h.rails = static_cast<std::uint8_t>(1 + keys);
        payload = 0;
    }
    bool carries = h.type == frame::abort;
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
