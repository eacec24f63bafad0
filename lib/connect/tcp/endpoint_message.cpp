// The TCP endpoint exchange's message: encoding, and a decoder that names
// the first field it rejects (docs/wire-formats.md).
#include "connect/tcp/endpoint_message.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace cordma::detail {

namespace {

void put16(std::uint8_t* p, std::uint16_t v) noexcept {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}

void put32(std::uint8_t* p, std::uint32_t v) noexcept {
    put16(p, static_cast<std::uint16_t>(v >> 16));
    put16(p + 2, static_cast<std::uint16_t>(v));
}

std::uint16_t get16(const std::uint8_t* p) noexcept { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }

std::uint32_t get32(const std::uint8_t* p) noexcept {
    return static_cast<std::uint32_t>(get16(p)) << 16 | get16(p + 2);
}

std::string hex(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

}  // namespace

std::array<std::uint8_t, endpoint_message_size> encode_endpoint_message(const endpoint_message& message) {
    std::array<std::uint8_t, endpoint_message_size> out{};
    put32(&out[0], endpoint_magic);
    put16(&out[4], endpoint_version);
    put16(&out[6], message.endpoint.lid);
    put32(&out[8], message.endpoint.qpn);
    put32(&out[12], message.endpoint.psn);
    std::memcpy(&out[16], message.endpoint.gid.raw, 16);
    out[32] = static_cast<std::uint8_t>(message.mtu);
    out[33] = message.agent ? 0 : endpoint_flag_no_agent;
    put16(&out[34], message.agent ? 0 : message.private_data_length);
    return out;
}

endpoint_message decode_endpoint_message(std::span<const std::uint8_t, endpoint_message_size> in) {
    auto bad = [](const char* field, const std::string& why) {
        return std::invalid_argument(std::string("field '") + field + "' " + why);
    };
    if (std::uint32_t magic = get32(&in[0]); magic != endpoint_magic)
        throw bad("magic", "is " + hex(magic) + ", expected " + hex(endpoint_magic) +
                               " (\"CRDM\"): the peer does not speak cordma's TCP endpoint exchange");
    if (std::uint16_t version = get16(&in[4]); version != endpoint_version)
        throw bad("version", "is " + std::to_string(version) + ", this side speaks " +
                                 std::to_string(endpoint_version));
    endpoint_message out;
    out.endpoint.lid = get16(&in[6]);
    out.endpoint.qpn = get32(&in[8]);
    out.endpoint.psn = get32(&in[12]);
    std::memcpy(out.endpoint.gid.raw, &in[16], 16);
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
    std::uint8_t mtu = in[32];
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096)
        throw bad("mtu", "is " + std::to_string(mtu) + ", not an MTU code (1..5 = 256..4096 bytes)");
    out.mtu = static_cast<ibv_mtu>(mtu);
    std::uint8_t flags = in[33];
    if ((flags & ~endpoint_flag_no_agent) != 0)
        throw bad("flags", "is " + std::to_string(flags) + ", and only bit 0 (no agent) is defined");
    out.agent = (flags & endpoint_flag_no_agent) == 0;
    out.private_data_length = get16(&in[34]);
    if (out.agent && out.private_data_length != 0)
        throw bad("private_data_length", "is " + std::to_string(out.private_data_length) +
                                             ", but only a message without an agent (flags bit 0) carries private data");
    if (out.private_data_length > endpoint_max_private_data)
        throw bad("private_data_length", "is " + std::to_string(out.private_data_length) + ", more than " +
                                             std::to_string(endpoint_max_private_data));
    return out;
}

}  // namespace cordma::detail
