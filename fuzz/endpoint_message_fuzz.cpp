// libFuzzer target for the TCP endpoint exchange's message
// (lib/connect/tcp/endpoint_message.hpp, docs/wire-formats.md).
//
// A peer controls every byte decode_endpoint_message reads: the 36 bytes
// the other side of an endpoint_exchange::tcp socket sends, once for the
// data QP and, with the agent, once more for the control QP. So decode must
// never read out of bounds or fail with anything but std::invalid_argument
// naming the field (tcp_handshake turns that, and only that, into a
// protocol error naming the peer). Beyond not crashing, whatever it
// accepts must re-encode to the same 36 bytes, so no bit it ignores slips
// past; and it must keep the promises the handshake relies on: a private
// data length of at most 196 (tcp_handshake sizes its read by it), none
// with the agent, a QPN of 2.. and a PSN within 24 bits, an MTU code of
// 1..5, and an address to reach (a GID or a LID). Any breach aborts, which
// libFuzzer reports as a crash with the input saved.
//
// The input is what arrives on the socket: each whole 36-byte piece is
// decoded as a message in turn (the data QP's, then the agent's). Each is
// copied into a buffer of exactly 36 bytes, so that AddressSanitizer sees a
// read past the message.
//
// The same bytes are also read as 64-byte rail messages (what follows
// "ready" on a connection with rails: rail_message.hpp), with the same
// demands: refused only with the field named, and re-encoded to the same
// bytes when accepted.
//
// Built and run by fuzz/run-fuzz --target endpoint_message (the
// `endpoint_message_fuzz` test).

#include <algorithm>
#include <array>
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

#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/rail_message.hpp"

namespace cd = cordma::detail;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "endpoint_message_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

void check(const std::uint8_t* bytes) {
    auto exact = std::make_unique<std::uint8_t[]>(cd::endpoint_message_size);
    std::memcpy(exact.get(), bytes, cd::endpoint_message_size);
    std::span<const std::uint8_t, cd::endpoint_message_size> in(exact.get(), cd::endpoint_message_size);

    cd::endpoint_message m;
    try {
        m = cd::decode_endpoint_message(in);
    } catch (const std::invalid_argument& e) {
        if (std::strncmp(e.what(), "field '", 7) != 0)
            die("decode refused a message without naming the field", e.what());
        return;
    } catch (const std::exception& e) {
        die("decode threw something other than std::invalid_argument", e.what());
    }

    if (m.endpoint.qpn < 2 || m.endpoint.qpn > 0xffffff)
        die("decode accepted a QPN outside 2..2^24-1", std::to_string(m.endpoint.qpn));
    if (m.endpoint.psn > 0xffffff)
        die("decode accepted a PSN wider than 24 bits", std::to_string(m.endpoint.psn));
    if (m.mtu < IBV_MTU_256 || m.mtu > IBV_MTU_4096)
        die("decode accepted an MTU code outside 1..5", std::to_string(static_cast<int>(m.mtu)));
    if (m.private_data_length > cd::endpoint_max_private_data)
        die("decode accepted more private data than 196 bytes", std::to_string(m.private_data_length));
    if (m.agent && m.private_data_length != 0)
        die("decode accepted private data with the agent on", std::to_string(m.private_data_length));
    if (m.endpoint.lid == 0 && std::all_of(std::begin(m.endpoint.gid.raw), std::end(m.endpoint.gid.raw),
                                           [](std::uint8_t b) { return b == 0; }))
        die("decode accepted an endpoint with neither a GID nor a LID");

    std::array<std::uint8_t, cd::endpoint_message_size> out = cd::encode_endpoint_message(m);
    if (std::memcmp(out.data(), exact.get(), cd::endpoint_message_size) != 0)
        die("re-encoding the decoded message changed its bytes");
}

/// The same input read as what follows "ready" on a connection with rails:
/// 64-byte rail messages (rail_message.hpp), for a connection of 4 rails.
void check_rail(const std::uint8_t* bytes) {
    auto exact = std::make_unique<std::uint8_t[]>(cd::rail_message_size);
    std::memcpy(exact.get(), bytes, cd::rail_message_size);
    std::span<const std::uint8_t, cd::rail_message_size> in(exact.get(), cd::rail_message_size);
    cd::rail_message m;
    try {
        m = cd::decode_rail_message(in, 4);
    } catch (const std::invalid_argument& e) {
        if (std::strncmp(e.what(), "rail message field '", 20) != 0 && std::strncmp(e.what(), "field '", 7) != 0)
            die("decode_rail_message refused a message without naming the field", e.what());
        return;
    } catch (const std::exception& e) {
        die("decode_rail_message threw something other than std::invalid_argument", e.what());
    }
    if (m.rail < 1 || m.rail > 3)
        die("decode_rail_message accepted a rail outside 1..3", std::to_string(m.rail));
    if (m.what != cd::rail_kind::answer && (m.probe_address != 0 || m.probe_rkey != 0))
        die("decode_rail_message accepted a probe word outside an answer");
    auto out = cd::encode_rail_message(m);
    if (std::memcmp(out.data(), exact.get(), cd::rail_message_size) != 0)
        die("re-encoding the decoded rail message changed its bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    for (std::size_t at = 0; size - at >= cd::endpoint_message_size; at += cd::endpoint_message_size)
        check(data + at);
    for (std::size_t at = 0; size - at >= cd::rail_message_size; at += cd::rail_message_size)
        check_rail(data + at);
    return 0;
}
