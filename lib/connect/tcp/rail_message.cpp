// The rail messages after "ready" (rail_message.hpp): encoding, and a
// decoder that names the first field it rejects.
#include "connect/tcp/rail_message.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "wire/byte_codec.hpp"

namespace cordma::detail {

std::array<std::uint8_t, rail_message_size> encode_rail_message(const rail_message& message) {
    std::array<std::uint8_t, rail_message_size> out{};
    byte_writer w(out);
    w.u32(rail_message_magic);
    w.u8(static_cast<std::uint8_t>(message.what));
    w.u8(message.rail);
    w.u16(message.attempt);
    w.u32(message.generation);
    if (message.what == rail_kind::join || message.what == rail_kind::answer)
        w.bytes(std::as_bytes(std::span<const std::uint8_t>(encode_endpoint_message(message.endpoint))));
    else
        w.zeros(endpoint_message_size);
    w.u64(message.probe_address);
    w.u32(message.probe_rkey);
    w.u32(0);
    return out;
}

rail_message decode_rail_message(std::span<const std::uint8_t, rail_message_size> in, std::size_t rails) {
    auto bad = [](const char* field, const std::string& why) {
        return std::invalid_argument(std::string("rail message field '") + field + "' " + why);
    };
    byte_reader r(in);
    if (std::uint32_t magic = r.u32(); magic != rail_message_magic)
        throw bad("magic", "is " + std::to_string(magic) + ", expected " + std::to_string(rail_message_magic) +
                               " (\"CRDL\")");
    rail_message out;
    std::uint8_t what = r.u8();
    if (what < 1 || what > 4)
        throw bad("kind", "is " + std::to_string(what) + ", not 1..4 (down, join, answer, up)");
    out.what = static_cast<rail_kind>(what);
    out.rail = r.u8();
    if (out.rail == 0 || out.rail >= rails)
        throw bad("rail", "is " + std::to_string(out.rail) + ", and this connection's rails 1.. are 1.." +
                              std::to_string(rails - 1));
    out.attempt = r.u16();
    out.generation = r.u32();
    auto endpoint = r.bytes(endpoint_message_size);
    std::array<std::uint8_t, endpoint_message_size> raw{};
    for (std::size_t i = 0; i < raw.size(); ++i)
        raw[i] = static_cast<std::uint8_t>(endpoint[i]);
    if (out.what == rail_kind::join || out.what == rail_kind::answer) {
        out.endpoint = decode_endpoint_message(raw);
    } else if (std::any_of(raw.begin(), raw.end(), [](std::uint8_t b) { return b != 0; })) {
        throw bad("endpoint", std::string("is set in a '") + to_string(out.what) + "', which carries none");
    }
    out.probe_address = r.u64();
    out.probe_rkey = r.u32();
    if (out.what != rail_kind::answer && (out.probe_address != 0 || out.probe_rkey != 0))
        throw bad("probe_address", std::string("or 'probe_rkey' is set in a '") + to_string(out.what) +
                                       "', and only an answer carries a probe word");
    if (std::uint32_t zero = r.u32(); zero != 0)
        throw bad("zero", "(offset 60) is " + std::to_string(zero) + ", not 0");
    if (r.remaining() != 0)
        throw bad("length", "has bytes left over (internal error)");
    return out;
}

const char* to_string(rail_kind what) noexcept {
    switch (what) {
    case rail_kind::down: return "down";
    case rail_kind::join: return "join";
    case rail_kind::answer: return "answer";
    case rail_kind::up: return "up";
    }
    return "?";
}

}  // namespace cordma::detail
