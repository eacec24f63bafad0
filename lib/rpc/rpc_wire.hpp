#pragma once
/// The frames of cordma::rpc between a client and a server, one per SEND
/// (into the server's shared receive queue, or the client's receive
/// queue), little-endian. A request or a response with its payload inline
/// (the frames of almost every call) has a 16-byte header, its payload's
/// size being the rest of the frame; every other frame a 48-byte one.
/// docs/rpc.md describes the protocol, docs/wire-formats.md the bytes.
///
/// request, response (16 bytes, then the payload):
///  0  u16 magic 0x5052 ("RP")     2  u8 version (2)     3  u8 type
///  4  u32 credits                 8  u32 id            12  u32 code
///
/// A traced request or request_rts (a call given a trace id, trace.hpp)
/// sets the type byte's high bit (traced_flag) and has the call's 16-byte
/// trace id right after its header (before the payload of an inline one).
/// Only requests carry one, and only to a server whose hello has
/// hello_traces.
///
/// every other frame (48 bytes):
///  0  u16 magic 0x5052 ("RP")     2  u8 version (2)     3  u8 type
///  4  u32 credits: calls the sender hands back to the receiver (server to
///     client: requests it has finished with, or new grants; client to
///     server, in a release frame only: unused credits given up)
///  8  u64 id: the call's number, chosen by the client (unique among its
///     calls in flight; 32 bits, the high half zero but in a hello)
/// 16  u32 code: a request's method; a response's status (0: ok, else an
///     rpc_errc); a hello's protocol version
/// 20  u32 reserved (0)
/// 24  u64 size: payload bytes (in the sender's memory at addr/rkey)
/// 32  u64 addr                    40  u32 rkey     44  u32 reserved (0);
///     a rendezvous frame's: how many rail keys follow (0..3)
///
/// A rendezvous frame (request_rts, response_rts) for memory registered on
/// the sender's rails (builder::rails) carries its key on each rail 1..
/// after its header (and a request's trace id), a u32 each, so the
/// reader's RDMA READ is striped over every rail (docs/rails.md).
///
/// hello (once each way, in the connection's private data: the client's
/// connect request, the server's accept) reuses the fields: size = the
/// largest inline payload the sender accepts (its receive buffers, less the
/// header); credits (server only) = the calls the client may have in
/// flight; addr = the largest request (server) or response (client) it
/// takes; code = the protocol version, and in its high 16 bits the server's
/// flags (hello_deferred_credits: the credits come in a credit frame, not
/// at once); and the server's hello carries the address and rkey of its
/// liveness word (8 bytes the client reads while calls wait) in id and
/// rkey. Every server sets hello_deferred_credits: with a shared receive
/// queue its credits come out of one budget (the SRQ's receives) shared
/// fairly by its clients, so a client
/// may get fewer than `credits` (the most it can ever hold), or none until
/// another gives some back; a credit frame's `size` asks a client for that
/// many of its unused credits back, which it returns in a release frame.
///
/// Elastic receives (docs/rpc.md, "Elastic receives"): a client's hello may
/// also say, in rkey, the inline payload its receives hold once grown. Its
/// receives start small (size); the
/// server, holding a response that fits the grown size but not the room it
/// has, sends a grow frame (and the response by rendezvous meanwhile); the
/// client's next done frame answers with the room: from its receive number
/// `addr` on (counting every frame the server sent it, from 0), its
/// receives hold `size` bytes of payload (the small size if it could not
/// grow), and in code how many receives it posts. After a second with no frame that needed the room, the server
/// sends a shrink frame (frames from then on are small again) and a pad
/// frame per client receive, which cycle the big receives out.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <cordma/remote_slice.hpp>
#include <cordma/trace.hpp>

namespace cordma::detail::rpc_wire {

inline constexpr std::uint16_t magic = 0x5052;
/// 2: requests and responses with 16-byte headers and 32-bit ids (1 had
/// 48-byte headers on every frame).
inline constexpr std::uint8_t version = 2;
/// A server hello's flag (code >> 16): the server grants the client's
/// credits in a credit frame (once it has posted the client's receives,
/// without a shared receive queue; out of its clients' budget, with one);
/// the client may not send before. Every cordma server sets it.
inline constexpr std::uint32_t hello_deferred_credits = 1;
/// A server hello's flag (code >> 16): the server reads traced requests.
inline constexpr std::uint32_t hello_traces = 2;
/// The type byte's bit of a traced request: a 16-byte trace id follows
/// the header.
inline constexpr std::uint8_t traced_flag = 0x80;
/// The bytes of a trace id after a traced request's header.
inline constexpr std::size_t trace_size = 16;
/// The header of every frame but an inline request or response.
inline constexpr std::size_t header_size = 48;
/// The header of an inline request or response.
inline constexpr std::size_t inline_header_size = 16;
/// The largest call id: ids are 32 bits (the client's counter wraps).
inline constexpr std::uint64_t largest_id = 0xffffffffu;

enum class frame : std::uint8_t {
    hello = 1,         ///< limits and credits, once each way
    request = 2,       ///< a call, its payload inline
    request_rts = 3,   ///< a call whose payload the server reads (addr, rkey, size)
    response = 4,      ///< an answer, its payload inline (or an error's message)
    response_rts = 5,  ///< an answer the client reads; it sends `done` after
    done = 6,          ///< the client has read a response_rts: its memory is free
    credit = 7,        ///< `credits`, and in `size` the unused credits the server asks back
    release = 8,       ///< client: `credits` unused credits handed back, as a credit frame asked
    grow = 9,          ///< server: please grow your receives; answer with the room in a done
    shrink = 10,       ///< server: your receives may be small again (frames from now on are)
    pad = 11,          ///< server: nothing; fills a receive so it is posted again small
};

/// A client's receives before they grow: 256 bytes, header included.
inline constexpr std::size_t small_receive = 256;

/// The most rail keys a rendezvous frame carries (rails 1..).
inline constexpr std::size_t max_rail_keys = 3;
/// The longest header any frame has: a traced request_rts with every rail key.
inline constexpr std::size_t max_header_size = header_size + trace_size + 4 * max_rail_keys;

struct header {
    frame type = frame::request;
    std::uint32_t credits = 0;
    std::uint64_t id = 0;
    std::uint32_t code = 0;
    std::uint64_t size = 0;
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    /// A request's trace id (empty: untraced, as every other frame is).
    trace_id trace{};
    /// A rendezvous frame: the sender's memory's keys on its rails 1..
    /// (the first `rails - 1`), 1 when it has rail 0's only.
    std::uint8_t rails = 1;
    std::array<std::uint32_t, max_rail_keys> rail_rkeys{};
};

/// Whether frames of `type` announce the sender's memory (addr, rkey) for
/// the receiver to read.
constexpr bool is_rendezvous(frame type) noexcept {
    return type == frame::request_rts || type == frame::response_rts;
}

/// Whether frames of `type` carry `size` bytes of payload after the header.
constexpr bool carries_payload(frame type) noexcept {
    return type == frame::request || type == frame::response;
}

/// A rendezvous frame's key for `region` (its rkey and its keys on the
/// sender's rails).
inline void set_key(header& h, const remote_slice& region) noexcept {
    h.rkey = region.rkey;
    h.rails = static_cast<std::uint8_t>(region.rails < 1 + max_rail_keys ? region.rails : 1 + max_rail_keys);
    for (std::size_t i = 0; i + 1 < h.rails; ++i)
        h.rail_rkeys[i] = region.rail_rkeys[i];
}

/// What a rendezvous frame announces, as the reader's remote_slice (its
/// keys on every rail the sender named).
inline remote_slice where(const header& h) noexcept {
    remote_slice out{h.addr, h.size, h.rkey, access_flags::remote_read};
    out.rails = h.rails;
    for (std::size_t i = 0; i + 1 < h.rails; ++i)
        out.rail_rkeys[i] = h.rail_rkeys[i];
    return out;
}

/// Bytes of the header of a frame of `type`: where its payload starts.
constexpr std::size_t header_length(frame type) noexcept {
    return carries_payload(type) ? inline_header_size : header_size;
}

/// Bytes before the payload of `h`'s frame: its header, a traced
/// request's trace id, and a rendezvous frame's rail keys.
constexpr std::size_t header_length(const header& h) noexcept {
    return header_length(h.type) + (h.trace.empty() ? 0 : trace_size) +
           (is_rendezvous(h.type) && h.rails > 1 ? 4 * static_cast<std::size_t>(h.rails - 1) : 0);
}

/// Writes `h` (header_length(h) bytes, its trace id too if it has one; h.id at most largest_id but in
/// a hello) at the front of `out` (at least that long); returns the bytes
/// written.
std::size_t encode(const header& h, std::span<std::byte> out) noexcept;
/// The header of `frame` (all of the bytes that arrived), or nothing with
/// the reason in `why`: too short, bad magic or version, unknown type,
/// reserved bytes set, a trace id on a frame other than a request (or an
/// all-zero one), an id over 32 bits, a payload length that does not match the header, a
/// rendezvous frame without a size (its key is the sender's business: a
/// forged one fails the read, which closes that connection).
std::optional<header> decode(std::span<const std::byte> frame, std::string& why);

const char* name(frame type) noexcept;

}  // namespace cordma::detail::rpc_wire
