#pragma once
/// What the TCP endpoint exchange's socket carries after "ready" on a
/// connection with rails (builder::rails): the messages that take a failed
/// rail down on both sides and admit it again (rail_rejoin.hpp). Without
/// rails nothing follows "ready".
///
/// Rail message, version 1 (64 bytes; integers little-endian):
///
///     offset  size  field
///          0     4  magic       0x4352444c ("CRDL")
///          4     1  kind        1 down: the sender's rail failed in
///                                 `generation`
///                               2 join: the client's new QP on the rail
///                                 (`endpoint`), to be `generation`
///                               3 answer: the listener's new QP (`endpoint`)
///                                 and its probe word (`probe_address`,
///                                 `probe_rkey`: 8 bytes the client reads
///                                 over the new QPs before it trusts them)
///                               4 up: the client's probe read succeeded;
///                                 both sides stripe over the rail again
///          5     1  rail        1..3
///          6     2  attempt     the client's number for this attempt
///                               (join); echoed in its answer and up, so
///                               a late answer to an attempt given up
///                               never pairs with the next one's QP
///          8     4  generation  the times the rail was admitted again
///         12    36  endpoint    an endpoint message (endpoint_message.hpp)
///                               in join and answer; zero otherwise
///         48     8  probe_address   answer only
///         56     4  probe_rkey      answer only (the rail's key)
///         60     4  zero

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "connect/tcp/endpoint_message.hpp"

namespace cordma::detail {

enum class rail_kind : std::uint8_t { down = 1, join = 2, answer = 3, up = 4 };

struct rail_message {
    rail_kind what = rail_kind::down;
    std::uint8_t rail = 1;
    /// join, answer, up: the client's attempt (0 in down).
    std::uint16_t attempt = 0;
    std::uint32_t generation = 0;
    /// join and answer.
    endpoint_message endpoint;
    /// answer.
    std::uint64_t probe_address = 0;
    std::uint32_t probe_rkey = 0;
};

inline constexpr std::uint32_t rail_message_magic = 0x4352444c;  // "CRDL"
inline constexpr std::size_t rail_message_size = 64;

std::array<std::uint8_t, rail_message_size> encode_rail_message(const rail_message& message);

/// Checks every field. Throws std::invalid_argument naming the first field
/// that is wrong and its value; `rails`: the connection's rails (a message
/// naming rail 0 or one past them is refused).
rail_message decode_rail_message(std::span<const std::uint8_t, rail_message_size> bytes, std::size_t rails);

const char* to_string(rail_kind what) noexcept;

}  // namespace cordma::detail
