#pragma once
/// The TCP endpoint exchange (endpoint_exchange::tcp): for peers that cannot
/// use rdma_cm, each side sends the other its QP endpoint over a TCP socket,
/// and the socket stays open afterwards to tell each side when the other goes.
///
/// The conversation, the same for both sides (all integers little-endian,
/// as in every cordma format: wire/byte_codec.hpp):
///
///     <- endpoint message (36 bytes)      (the listener's, sent at once;
///                                          the client reads it first)
///     -> endpoint message (36 bytes)
///        with the agent: a second pair, for the agent's control QP;
///        without it (flags bit 0): the private data, as long as the
///        message says, follows each message instead
///        with rails (flags bits 1-2): one more pair per rail 1.., same
///        format, the QP on that rail's device (both sides must have as
///        many rails)
///        every QP goes RESET -> INIT -> RTR -> RTS
///     -> ready (1 byte, 'R')              <- ready (1 byte, 'R')
///        then nothing more; EOF or an error on the socket means the peer is gone
///
/// Endpoint message, version 1:
///
///     offset  size  field
///          0     4  magic     0x4352444d ("CRDM")
///          4     2  version   1
///          6     2  lid       0 on RoCE
///          8     4  qpn       24 bits, >= 2
///         12     4  psn       24 bits
///         16    16  gid       raw, as ibv_gid
///         32     1  mtu       ibv_mtu code 1..5 (256..4096 bytes): the
///                             sender's path MTU cap; both use the smaller
///         33     1  flags     bit 0: no agent (builder::agent(false));
///                             bits 1-2: rails - 1 (builder::rails; 0: one
///                             rail); the other bits zero
///         34     2  private_data_length
///                             bytes of private data after the message, at
///                             most 196; 0 unless flags bit 0 is set
///
/// A listener that cannot take the client (its backlog is full) sends a
/// refusal instead of its endpoint message and closes the socket; the
/// client has sent nothing yet, so the close is a clean one (no reset that
/// could discard the refusal). Refusal, version 1 (36 bytes, as a message):
///
///     offset  size  field
///          0     4  magic     0x43524452 ("CRDR")
///          4     2  version   1
///          6     2  reason    1: the listener's backlog is full
///          8     2  backlog   the listener's builder::backlog (at most 65535)
///         10    26  zero
///
/// "ready" waits until both QPs are in RTS, so neither side sends before the
/// other can receive. The Asio side (io thread, sockets, handshake) lives in the
/// other files of lib/connect/tcp/ (tcp_io.hpp explains them); this header
/// carries no Asio.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include <cordma/queue_pair.hpp>

namespace cordma::detail {

/// One side's endpoint message: what the other needs to connect its QP.
struct endpoint_message {
    qp_endpoint endpoint;
    ibv_mtu mtu = IBV_MTU_4096;
    /// false: the sender has builder::agent(false) (flags bit 0).
    bool agent = true;
    /// Bytes of private data following the message (only without an agent).
    std::uint16_t private_data_length = 0;
    /// The sender's rails (flags bits 1-2, plus one): as many endpoint
    /// messages follow, one per rail 1..
    std::uint8_t rails = 1;
};

inline constexpr std::uint32_t endpoint_magic = 0x4352444d;  // "CRDM"
inline constexpr std::uint16_t endpoint_version = 1;
inline constexpr std::size_t endpoint_message_size = 36;
inline constexpr std::uint8_t ready_byte = 'R';
inline constexpr std::uint8_t endpoint_flag_no_agent = 0x01;
inline constexpr std::uint8_t endpoint_rails_shift = 1;
inline constexpr std::uint8_t endpoint_rails_mask = 0x06;
/// As much as an rdma_cm accept carries, so both transports take the same.
inline constexpr std::uint16_t endpoint_max_private_data = 196;

std::array<std::uint8_t, endpoint_message_size> encode_endpoint_message(const endpoint_message& message);

/// A listener's refusal (instead of its endpoint message).
struct endpoint_refusal {
    static constexpr std::uint16_t backlog_full = 1;
    std::uint16_t reason = backlog_full;
    std::uint16_t backlog = 0;
};
inline constexpr std::uint32_t refusal_magic = 0x43524452;  // "CRDR"

std::array<std::uint8_t, endpoint_message_size> encode_endpoint_refusal(const endpoint_refusal& refusal);
/// The refusal in `bytes`, if they are one (its magic and version; any
/// reason, so a newer listener's reason still reads as a refusal).
std::optional<endpoint_refusal> endpoint_refusal_of(std::span<const std::uint8_t, endpoint_message_size> bytes);

/// Checks every field. Throws std::invalid_argument naming the first field
/// that is wrong and its value ("field 'version' is 9, this side speaks 1").
endpoint_message decode_endpoint_message(std::span<const std::uint8_t, endpoint_message_size> bytes);

/// One io_context thread per runtime, made on first use (runtime::tcp).
class tcp_service;

}  // namespace cordma::detail
