#pragma once
/// The frames two processes exchange over a link (on the data QP, in the
/// receives each link keeps posted): a group's ranks, C API peers, streams. Every frame starts with a
/// fixed 48-byte header, little-endian; data frames carry their payload
/// right after it. docs/group.md describes the protocol.
///
///  0  u16 magic 0x4347 ("CG")     2  u8 type     3  u8 collective
///  4  u16 step                    6  u16 reserved (0)
///  8  u32 seq: the collective's number in the group (1, 2, ...)
/// 12  u32 acked: how many of the receiver's credit-counted frames (data,
///     rts) the sender has handled so far (wraps)
/// 16  u32 root                   20  u32 extra (reductions: type << 8 | op)
/// 24  u64 size: payload bytes (data: after the header; rts: in the
///     sender's buffer)
/// 32  u64 addr                   40  u32 rkey   44  u32 reserved (0)
///
/// hello (once each way, right after connecting) reuses the fields:
/// root = group size, extra = sender's rank, step = receiver's rank,
/// seq = the sender's window, size = the group's id (a hash of every
/// endpoint), addr = the sender's eager size.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace cordma::detail::link_wire {

inline constexpr std::uint16_t magic = 0x4347;
inline constexpr std::size_t header_size = 48;

enum class frame : std::uint8_t {
    hello = 1,   ///< who is on each end, and the group's shape
    data = 2,    ///< a message inline (counts against the window)
    rts = 3,     ///< "read my buffer": addr, rkey, size (counts against the window)
    fin = 4,     ///< the receiver of an rts has read it: the sender's buffer is free
    credit = 5,  ///< only `acked`: room in the window
    abort = 6,   ///< the sender's group failed; the payload says why
    ping = 7,    ///< "are you there?": answered at once with a credit frame
};

enum class collective : std::uint8_t {
    none = 0,
    barrier = 1,
    broadcast = 2,
    all_to_all = 3,
    all_gather = 4,
    gather = 5,
    scatter = 6,
    reduce = 7,
    all_reduce = 8,
    /// The C API's point-to-point message (cordma_send).
    message = 9,
    /// A stream's bytes (extra 0), or its end (extra 1, no bytes).
    stream = 10,
};

struct header {
    frame type = frame::data;
    collective op = collective::none;
    std::uint16_t step = 0;
    std::uint32_t seq = 0;
    std::uint32_t acked = 0;
    std::uint32_t root = 0;
    std::uint32_t extra = 0;
    std::uint64_t size = 0;
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
};

void encode(const header& h, std::span<std::byte, header_size> out) noexcept;
/// The header of `frame`, or nothing with the reason in `why` (bad magic,
/// unknown type or collective, reserved bytes set, a size that does not
/// match the frame's length).
std::optional<header> decode(std::span<const std::byte> frame, std::string& why);

const char* name(collective op) noexcept;
const char* name(frame type) noexcept;

}  // namespace cordma::detail::link_wire
