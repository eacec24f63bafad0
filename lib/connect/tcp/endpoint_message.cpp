// The TCP endpoint exchange's message: encoding, and a decoder that names
// the first field it rejects (docs/wire-formats.md).
#include "connect/tcp/endpoint_message.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "wire/byte_codec.hpp"

namespace cordma::detail {

namespace {

std::string hex(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

}  // namespace

std::array<std::uint8_t, endpoint_message_size> encode_endpoint_message(const endpoint_message& message) {
    std::array<std::uint8_t, endpoint_message_size> out{};
    byte_writer w(out);
    w.u32(endpoint_magic);
    w.u16(endpoint_version);
    w.u16(message.endpoint.lid);
    w.u32(message.endpoint.qpn);
    w.u32(message.endpoint.psn);
    w.bytes(std::as_bytes(std::span(message.endpoint.gid.raw)));
    w.u8(static_cast<std::uint8_t>(message.mtu));
    w.u8(static_cast<std::uint8_t>((message.agent ? 0 : endpoint_flag_no_agent) |
                                   ((message.rails - 1) << endpoint_rails_shift)));
    w.u16(message.agent ? 0 : message.private_data_length);
    return out;
}

endpoint_message decode_endpoint_message(std::span<const std::uint8_t, endpoint_message_size> in) {
    auto bad = [](const char* field, const std::string& why) {
        return std::invalid_argument(std::string("field '") + field + "' " + why);
    };
    byte_reader r(in);
    if (std::uint32_t magic = r.u32(); magic != endpoint_magic)
        throw bad("magic", "is " + hex(magic) + ", expected " + hex(endpoint_magic) +
                               " (\"CRDM\"): the peer does not speak cordma's TCP endpoint exchange");
    if (std::uint16_t version = r.u16(); version != endpoint_version)
        throw bad("version", "is " + std::to_string(version) + ", this side speaks " +
                                 std::to_string(endpoint_version));
    endpoint_message out;
    out.endpoint.lid = r.u16();
    out.endpoint.qpn = r.u32();
    out.endpoint.psn = r.u32();
    auto gid = r.bytes(sizeof out.endpoint.gid.raw);
    std::memcpy(out.endpoint.gid.raw, gid.data(), gid.size());
    std::uint8_t mtu = r.u8();
    std::uint8_t flags = r.u8();
    out.private_data_length = r.u16();
    if (out.endpoint.qpn > 0xffffff)
        throw bad("qpn", "is " + std::to_string(out.endpoint.qpn) + ", more than 24 bits");
    if (out.endpoint.qpn < 2)
        throw bad("qpn", "is " + std::to_string(out.endpoint.qpn) + ": QPs 0 and 1 are management QPs, never RC");
    if (out.endpoint.psn > 0xffffff)
        throw bad("psn", "is " + std::to_string(out.endpoint.psn) + ", more than 24 bits");
    bool gid_zero = true;
    for (std::uint8_t b : out.endpoint.gid.raw)
        gid_zero = gid_zero && b == 0;
    if (gid_zero && out.endpoint.lid == 0)
        throw bad("gid", "is all zeros and 'lid' is 0: no address to reach the peer's QP at");
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096)
        throw bad("mtu", "is " + std::to_string(mtu) + ", not an MTU code (1..5 = 256..4096 bytes)");
    out.mtu = static_cast<ibv_mtu>(mtu);
    if ((flags & ~(endpoint_flag_no_agent | endpoint_rails_mask)) != 0)
        throw bad("flags", "is " + std::to_string(flags) +
                               ", and only bit 0 (no agent) and bits 1-2 (rails - 1) are defined");
    out.agent = (flags & endpoint_flag_no_agent) == 0;
    out.rails = static_cast<std::uint8_t>(1 + ((flags & endpoint_rails_mask) >> endpoint_rails_shift));
    if (out.agent && out.private_data_length != 0)
        throw bad("private_data_length", "is " + std::to_string(out.private_data_length) +
                                             ", but only a message without an agent (flags bit 0) carries private data");
    if (out.private_data_length > endpoint_max_private_data)
        throw bad("private_data_length", "is " + std::to_string(out.private_data_length) + ", more than " +
                                             std::to_string(endpoint_max_private_data));
    return out;
}

std::array<std::uint8_t, endpoint_message_size> encode_endpoint_refusal(const endpoint_refusal& refusal) {
    std::array<std::uint8_t, endpoint_message_size> out{};
    byte_writer w(out);
    w.u32(refusal_magic);
    w.u16(endpoint_version);
    w.u16(refusal.reason);
    w.u16(refusal.backlog);
    return out;
}

std::optional<endpoint_refusal> endpoint_refusal_of(std::span<const std::uint8_t, endpoint_message_size> in) {
    byte_reader r(in);
    if (r.u32() != refusal_magic || r.u16() != endpoint_version)
        return std::nullopt;
    endpoint_refusal out;
    out.reason = r.u16();
    out.backlog = r.u16();
    return out;
}

}  // namespace cordma::detail
