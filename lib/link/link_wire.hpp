#pragma once
/// The frames two processes exchange over a link (on the data QP, in the
/// receives each link keeps posted), whichever module owns it. Every frame
/// starts with a fixed 48-byte header, little-endian; data frames carry
/// their payload right after it. docs/link.md describes the link,
/// docs/wire-formats.md the bytes.
///
///  0  u16 magic 0x4347 ("CG")     2  u8 type     3  u8 op
///  4  u16 step                    6  u16 reserved (0)
///  8  u32 seq: the owner's number for the operation (1, 2, ...)
/// 12  u32 acked: how many of the receiver's credit-counted frames (data,
///     rts) the sender has handled so far (wraps)
/// 16  u32 root                   20  u32 extra (the owner's)
/// 24  u64 size: payload bytes (abort: after the header; rts: in the
///     sender's buffer)
/// 32  u64 addr                   40  u32 rkey   44  u32 reserved (0);
///     an rts's: how many rail keys follow (0..3)
///
/// An rts of memory registered on the sender's rails (builder::rails)
/// carries its key on each rail 1.. after its header (and trace id), a
/// u32 each, so the reader's RDMA READ is striped over every rail
/// (docs/rails.md); one on rail 0 only carries none.
///
/// room (the receiver's answer to grow) reuses addr and size as its
/// comment says; grow, shrink and pad carry nothing but `acked`.
///
/// hello (once each way, right after connecting) reuses the fields:
/// seq = the sender's window, addr = the sender's eager size, size = a
/// mark naming the module (link_hello.hpp), rkey = flags
/// (hello_reads_traces); a module with its own hello may use root, extra
/// and step too.
///
/// A traced data or rts frame (a stream write or a group's frame given a
/// trace id, trace.hpp) sets the type byte's high bit (traced_flag) and has
/// the 16-byte trace id right after its header (before a data frame's
/// payload): 40 bytes of header for data, 64 for an rts, both within what
/// every receive holds (48 bytes and the inline size). Only to a peer whose
/// hello has hello_reads_traces; the link strips the id otherwise.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <cordma/trace.hpp>

namespace cordma::detail::link_wire {

inline constexpr std::uint16_t magic = 0x4347;
/// The link protocol a hello names (2: data frames with the 24-byte
/// header). A peer speaking another is refused when its hello arrives.
inline constexpr std::uint16_t version = 2;
/// Every frame's header but a data frame's.
inline constexpr std::size_t header_size = 48;
/// A data frame's header.
inline constexpr std::size_t data_header_size = 24;
/// The type byte's bit of a traced data or rts frame.
inline constexpr std::uint8_t traced_flag = 0x80;
/// The trace id's bytes after a traced frame's header.
inline constexpr std::size_t trace_size = 16;
/// A hello's flag (in rkey): the sender reads traced frames.
inline constexpr std::uint32_t hello_reads_traces = 1;
/// The most rail keys an rts carries (rails 1..).
inline constexpr std::size_t max_rail_keys = 3;
/// The longest header any frame has: a traced rts with every rail key.
inline constexpr std::size_t max_header_size = header_size + trace_size + 4 * max_rail_keys;

enum class frame : std::uint8_t {
    hello = 1,   ///< who is on each end, and the terms of the link
    data = 2,    ///< a message inline (counts against the window)
    rts = 3,     ///< "read my buffer": addr, rkey, size (counts against the window)
    fin = 4,     ///< the receiver of an rts has read it: the sender's buffer is free
    credit = 5,  ///< only `acked`: room in the window
    abort = 6,   ///< the sender's owner failed; the payload says why
    ping = 7,    ///< "are you there?": answered at once with a credit frame
    grow = 8,    ///< "I have frames larger than your receives": asks for room
    room = 9,    ///< "from your frame number `addr` on, my receives hold `size` bytes
                 ///< inline" (frames counted from the hello, number 0)
    shrink = 10, ///< "from this frame on, mine fit your first receives": they may shrink
    pad = 11,    ///< nothing (counts against the window): cycles grown receives out
};
/// The largest frame type decode() accepts.
inline constexpr std::uint8_t last_frame = 11;

/// What a data, rts or fin frame belongs to. The link knows what it
/// routes: a point-to-point message (handed to the message_sink) and a
/// stream's bytes (extra 0; its end: extra 1, no bytes). Values 1 to 8
/// are the owning module's own (module_op): each module numbers its
/// operations there (docs/link.md lists them); the link only carries them,
/// and asks its owner for their names.
enum class op : std::uint8_t {
    none = 0,     ///< control frames; an expected_frame that takes any frame
    message = 9,
    stream = 10,
};
inline constexpr std::uint8_t first_module_op = 1;
inline constexpr std::uint8_t last_module_op = 8;
/// The module's op numbered `n` (first_module_op .. last_module_op).
constexpr link_wire::op module_op(std::uint8_t n) noexcept { return static_cast<link_wire::op>(n); }
constexpr bool is_module_op(link_wire::op o) noexcept {
    auto n = static_cast<std::uint8_t>(o);
    return n >= first_module_op && n <= last_module_op;
}

struct header {
    frame type = frame::data;
    link_wire::op op = link_wire::op::none;
    std::uint16_t step = 0;
    std::uint32_t seq = 0;
    std::uint32_t acked = 0;
    std::uint32_t root = 0;
    std::uint32_t extra = 0;
    std::uint64_t size = 0;
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    /// A data or rts frame's trace id (empty: untraced, as every other is).
    trace_id trace{};
    /// An rts: the sender's memory's keys on its rails 1.. (the first
    /// `rails - 1`; remote_slice::rail_rkeys), 1 when it has rail 0's only.
    std::uint8_t rails = 1;
    std::array<std::uint32_t, max_rail_keys> rail_rkeys{};
};

/// Bytes of the header of a frame of `type`: where its payload starts.
constexpr std::size_t header_length(frame type) noexcept {
    return type == frame::data ? data_header_size : header_size;
}

/// Bytes before the payload of `h`'s frame: its header, a traced frame's
/// trace id, and an rts's rail keys.
constexpr std::size_t header_length(const header& h) noexcept {
    return header_length(h.type) + (h.trace.empty() ? 0 : trace_size) +
           (h.type == frame::rts && h.rails > 1 ? 4 * static_cast<std::size_t>(h.rails - 1) : 0);
}

/// Writes `h` (header_length(h) bytes, a hello with `version`; the trace
/// id of a data or rts frame that has one) at the front of `out` (at least
/// that long); returns the bytes written.
std::size_t encode(const header& h, std::span<std::byte> out) noexcept;
/// The header of `frame`, or nothing with the reason in `why` (bad magic,
/// unknown type or op, reserved bytes set, an rts naming more rail keys
/// than max_rail_keys or than it carries, a hello of another protocol
/// version, a size that does not match the frame's length, a trace id on
/// a frame other than data or rts, or an all-zero one). A data frame's
/// size is its length less its header (and trace id).
std::optional<header> decode(std::span<const std::byte> frame, std::string& why);

/// The payload of a data or abort frame that decode() accepted as `h`.
inline std::span<const std::byte> payload(std::span<const std::byte> frame, const header& h) noexcept {
    return frame.subspan(header_length(h), static_cast<std::size_t>(h.size));
}

/// "message", "stream", "none"; a module op: "op 3" (its owner names it).
std::string name(link_wire::op o);
const char* name(frame type) noexcept;

}  // namespace cordma::detail::link_wire
