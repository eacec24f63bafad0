// rpc_wire: encoding and checking the header of cordma::rpc's frames. A
// peer controls every byte decode() reads: it rejects, with a reason, all
// that encode() could not have written.
#include "rpc/rpc_wire.hpp"

#include <cstring>

#include "link/little_endian.hpp"

namespace cordma::detail::rpc_wire {
namespace {

using little_endian::get;
using little_endian::put;

constexpr std::uint8_t last_type = static_cast<std::uint8_t>(frame::credit);

}  // namespace

void encode(const header& h, std::span<std::byte, header_size> out) noexcept {
    std::byte* p = out.data();
    std::memset(p, 0, header_size);
    put<std::uint16_t>(p + 0, magic);
    put<std::uint8_t>(p + 2, version);
    put<std::uint8_t>(p + 3, static_cast<std::uint8_t>(h.type));
    put<std::uint32_t>(p + 4, h.credits);
    put<std::uint64_t>(p + 8, h.id);
    put<std::uint32_t>(p + 16, h.code);
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
        why = "a frame without cordma::rpc's magic number (not a cordma rpc peer?)";
        return std::nullopt;
    }
    if (auto v = get<std::uint8_t>(p + 2); v != version) {
        why = "a frame of protocol version " + std::to_string(v) + " (this side speaks " + std::to_string(version) +
              ")";
        return std::nullopt;
    }
    auto type = get<std::uint8_t>(p + 3);
    if (type < 1 || type > last_type) {
        why = "a frame of unknown type " + std::to_string(type);
        return std::nullopt;
    }
    header h;
    h.type = static_cast<frame>(type);
    if (get<std::uint32_t>(p + 20) != 0 || get<std::uint32_t>(p + 44) != 0) {
        why = std::string("a ") + name(h.type) + " frame with its reserved bytes set";
        return std::nullopt;
    }
    h.credits = get<std::uint32_t>(p + 4);
    h.id = get<std::uint64_t>(p + 8);
    h.code = get<std::uint32_t>(p + 16);
    h.size = get<std::uint64_t>(p + 24);
    h.addr = get<std::uint64_t>(p + 32);
    h.rkey = get<std::uint32_t>(p + 40);
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
    if (!rendezvous && h.type != frame::hello && (h.addr != 0 || h.rkey != 0)) {
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
    }
    return "unknown";
}

}  // namespace cordma::detail::rpc_wire
