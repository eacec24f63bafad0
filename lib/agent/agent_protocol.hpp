#pragma once
/// The agent's wire format (docs/agent-protocol.md): small fixed-layout
/// messages on each connection's control queue pair, which user sends and
/// receives never see. Every field is validated on decode; a malformed
/// message is a protocol_error naming the problem, and the connection that
/// sent it is closed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cordma::detail::agent_protocol {

inline constexpr std::uint16_t magic = 0x4341;  // "CA" (cordma agent)
inline constexpr std::uint8_t version = 2;
/// No message is longer; receive buffers are this big.
inline constexpr std::size_t max_message_size = 256;
inline constexpr std::size_t max_reason_length = 200;
/// Flow control: a side may have at most `window` counted messages (every
/// type but ack) that the peer has not yet acknowledged in a header's
/// `acked` field. The receiver acknowledges a message only after its buffer
/// is posted again, and sends a bare ack once `ack_after` are unacknowledged.
inline constexpr std::uint32_t window = 16;
inline constexpr std::uint32_t ack_after = window / 2;
/// Receives each side keeps posted: the window, plus the bare acks that can
/// be on their way (each acknowledges at least ack_after of this side's
/// messages, so at most 2 are unread at once), plus slack.
inline constexpr std::uint32_t receive_depth = window + 4;
/// Region ids one release_mr carries (it fills a receive buffer).
inline constexpr std::size_t max_release_batch = 30;

/// Asks the peer to allocate, register and grant a region.
struct request_mr {
    std::uint32_t request_id = 0;
    std::uint64_t size = 0;        // 1 .. 2^40
    std::uint32_t alignment = 0;   // power of two, 1 .. 4096
    std::uint32_t lease_ms = 0;    // 0 = the owner's default
    std::uint32_t access = 0;      // IBV_ACCESS_REMOTE_{WRITE,READ,ATOMIC} bits only

    bool operator==(const request_mr&) const = default;
};

/// The owner's answer to request_mr, or an unsolicited grant (send_local_mr).
struct grant_mr {
    std::uint32_t request_id = 0;  // 0 for an unsolicited grant
    std::uint64_t region_id = 0;   // nonzero; names the region in later messages
    std::uint64_t address = 0;
    std::uint64_t length = 0;      // nonzero
    std::uint32_t rkey = 0;
    std::uint32_t lease_ms = 0;    // nonzero: time left from when it was sent
    std::uint32_t access = 0;      // remote access granted (same bits as request_mr)
    // Over rails (builder::rails): the region's key on each of the owner's
    // rails 1.. (the first rails - 1), after the fields above; 1: none.
    std::uint8_t rails = 1;
    std::array<std::uint32_t, 3> rail_rkeys{};

    bool operator==(const grant_mr&) const = default;
};

/// The owner refuses a request_mr (over a limit, out of memory).
struct deny_mr {
    std::uint32_t request_id = 0;  // nonzero
    std::uint32_t code = 0;        // a std::errc value
    std::string reason;            // UTF-8, at most max_reason_length bytes

    bool operator==(const deny_mr&) const = default;
};

/// A holder hands a region back to its owner (send_remote_mr): the owner
/// gets it as a local region again.
struct return_mr {
    std::uint64_t region_id = 0;

    bool operator==(const return_mr&) const = default;
};

/// A holder no longer needs these regions: the owner frees them. Drops
/// close together travel as one message.
struct release_mr {
    std::vector<std::uint64_t> region_ids;  // 1 .. max_release_batch, each nonzero

    bool operator==(const release_mr&) const = default;
};

/// The owner withdrew a region (revoked, or its lease ran out).
struct revoke_mr {
    std::uint64_t region_id = 0;

    bool operator==(const revoke_mr&) const = default;
};

/// Acknowledges the peer's messages (in the header) when there is nothing
/// else to carry the acknowledgement. Not counted, never acknowledged.
struct ack {
    bool operator==(const ack&) const = default;
};

using message = std::variant<request_mr, grant_mr, deny_mr, return_mr, release_mr, revoke_mr, ack>;

/// Type bytes on the wire, in variant order starting at 1.
enum class message_type : std::uint8_t {
    request_mr = 1,
    grant_mr = 2,
    deny_mr = 3,
    return_mr = 4,
    release_mr = 5,
    revoke_mr = 6,
    ack = 7,
};

/// "request_mr", "grant_mr", ...; "unknown" for a value outside the enum.
const char* to_string(message_type t) noexcept;

/// The type byte `m` travels under.
inline message_type type_of(const message& m) noexcept {
    return static_cast<message_type>(m.index() + 1);
}

/// `text` made into a reason deny_mr may carry: invalid UTF-8 bytes become
/// '?', control characters (newlines, NUL, escapes) spaces, and anything
/// past max_reason_length bytes is cut at a character boundary, ending in
/// "...". For reasons built from exception messages or user input.
std::string fit_reason(std::string_view text);

class protocol_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Writes `m` into `out` (at least max_message_size bytes) with `acked` in
/// its header (how many counted messages this side has handled from the
/// peer, modulo 2^16); returns the length. Throws std::invalid_argument if
/// `m` itself breaks the rules (e.g. a reason longer than max_reason_length).
std::size_t encode(const message& m, std::span<std::byte> out, std::uint16_t acked = 0);

/// Whether a message counts against the window (all but ack).
inline bool counted(const message& m) noexcept { return !std::holds_alternative<ack>(m); }

/// One message off the wire, with its header's acknowledgement.
struct frame {
    message body;
    std::uint16_t acked = 0;
};

/// Parses one message. Throws protocol_error naming the first problem:
/// wrong magic or version, unknown type, wrong length for the type, or a
/// field out of its range (zero region id, size 0, bad alignment, ...).
frame decode_frame(std::span<const std::byte> in);
inline message decode(std::span<const std::byte> in) { return decode_frame(in).body; }

}  // namespace cordma::detail::agent_protocol
