// rpc_wire: encoding and checking the header of cordma::rpc's frames. A
// peer controls every byte decode() reads: it rejects, with a reason, all
// that encode() could not have written.
#include "rpc/rpc_wire.hpp"

#include "wire/byte_codec.hpp"

namespace cordma::detail::rpc_wire {
namespace {

constexpr std::uint8_t last_type = static_cast<std::uint8_t>(frame::pad);

}  // namespace

std::size_t encode(const header& h, std::span<std::byte> out) noexcept {
    byte_writer w(out);
    w.u16(magic);
    w.u8(version);
    bool traced = !h.trace.empty();
    w.u8(static_cast<std::uint8_t>(static_cast<std::uint8_t>(h.type) | (traced ? traced_flag : 0)));
    w.u32(h.credits);
    if (carries_payload(h.type)) {
        w.u32(static_cast<std::uint32_t>(h.id));
        w.u32(h.code);
        if (traced)
            w.bytes(h.trace.bytes());
        return header_length(h);
    }
    w.u64(h.id);
    w.u32(h.code);
    w.zeros(4);
    w.u64(h.size);
    w.u64(h.addr);
    w.u32(h.rkey);
    std::size_t keys = is_rendezvous(h.type) && h.rails > 1 ? h.rails - 1u : 0;
    w.u32(static_cast<std::uint32_t>(keys));
    if (traced)
        w.bytes(h.trace.bytes());
    for (std::size_t i = 0; i < keys; ++i)
        w.u32(h.rail_rkeys[i]);
    return header_length(h);
}

std::optional<header> decode(std::span<const std::byte> bytes, std::string& why) {
    if (bytes.size() < inline_header_size) {
        why = "a frame of " + std::to_string(bytes.size()) + " bytes, shorter than the shortest (" +
              std::to_string(inline_header_size) + "-byte) header";
        return std::nullopt;
    }
    byte_reader r(bytes.first(inline_header_size));
    if (r.u16() != magic) {
        why = "a frame without cordma::rpc's magic number (not a cordma rpc peer?)";
        return std::nullopt;
    }
    if (auto v = r.u8(); v != version) {
        why = "a frame of protocol version " + std::to_string(v) + " (this side speaks " + std::to_string(version) +
              ": the two ends run different cordma versions, use the same on both)";
        return std::nullopt;
    }
    auto type = r.u8();
    bool traced = (type & traced_flag) != 0;
    type &= static_cast<std::uint8_t>(~traced_flag);
    if (type < 1 || type > last_type) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    header h;
    h.type = static_cast<frame>(type);
    h.credits = r.u32();
    if (traced) {
        if (h.type != frame::request && h.type != frame::request_rts) {
            why = std::string("a ") + name(h.type) + " frame marked traced (only requests carry a trace id)";
            return std::nullopt;
        }
        std::size_t at = header_length(h.type);
        if (bytes.size() < at + trace_size) {
            why = std::string("a traced ") + name(h.type) + " frame of " + std::to_string(bytes.size()) +
                  " bytes, shorter than its header and trace id (" + std::to_string(at + trace_size) + ")";
            return std::nullopt;
        }
        h.trace = trace_id(byte_reader(bytes.subspan(at)).array<trace_size>());
        if (h.trace.empty()) {
            why = std::string("a traced ") + name(h.type) + " frame whose trace id is all zero";
            return std::nullopt;
        }
    }
    std::size_t trace_bytes = traced ? trace_size : 0;
    if (carries_payload(h.type)) {
        h.id = r.u32();
        h.code = r.u32();
        h.size = bytes.size() - inline_header_size - trace_bytes;
        return h;
    }
    if (bytes.size() < header_size) {
        why = std::string("a ") + name(h.type) + " frame of " + std::to_string(bytes.size()) +
              " bytes, shorter than its " + std::to_string(header_size) + "-byte header";
        return std::nullopt;
    }
    byte_reader rest(bytes.subspan(8, header_size - 8));
    h.id = rest.u64();
    h.code = rest.u32();
    std::uint32_t reserved = rest.u32();
    h.size = rest.u64();
    h.addr = rest.u64();
    h.rkey = rest.u32();
    std::uint32_t keys = rest.u32();
    if (reserved != 0 || (keys != 0 && !is_rendezvous(h.type))) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    if (keys > max_rail_keys) {
        why = std::string("a ") + name(h.type) + " frame naming " + std::to_string(keys) + " rail keys (at most " +
              std::to_string(max_rail_keys) + ")";
        return std::nullopt;
    }
    // A hello's id is the server's liveness word's address; every other
    // frame's a call's (32 bits, as a request's compact header has them).
    if (h.type != frame::hello && h.id > largest_id) {
        why = std::string("a ") + name(h.type) + " frame with call id " + std::to_string(h.id) + ", over 32 bits";
        return std::nullopt;
    }
    if (bytes.size() != header_size + trace_bytes + 4 * keys) {
        why = std::string("a ") + name(h.type) + " frame of " + std::to_string(bytes.size()) + " bytes whose header says 0 bytes of payload" +
              (keys != 0 ? " and " + std::to_string(keys) + " rail key(s)" : std::string());
        return std::nullopt;
    }
    if (keys != 0) {
        byte_reader key_reader(bytes.subspan(header_size + trace_bytes));
        for (std::uint32_t i = 0; i < keys; ++i)
            h.rail_rkeys[i] = key_reader.u32();
        h.rails = static_cast<std::uint8_t>(1 + keys);
    }
    bool rendezvous = is_rendezvous(h.type);
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
