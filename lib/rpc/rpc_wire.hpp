#pragma once
/// The frames of cordma::rpc between a client and a server, one per SEND
/// (into the server's shared receive queue, or the client's receive
/// queue). Every frame starts with a fixed 48-byte header, little-endian;
/// inline frames carry their payload right after it. docs/rpc.md describes
/// the protocol.
///
///  0  u16 magic 0x5052 ("RP")     2  u8 version (1)     3  u8 type
///  4  u32 credits: calls the sender hands back to the receiver (server to
///     client: requests it has finished with); 0 from a client
///  8  u64 id: the call's number, chosen by the client (unique among its
///     calls in flight)
/// 16  u32 code: a request's method; a response's status (0: ok, else an
///     rpc_errc); a hello's protocol version
/// 20  u32 reserved (0)
/// 24  u64 size: payload bytes (inline: after the header; rendezvous: in
///     the sender's memory at addr/rkey)
/// 32  u64 addr                    40  u32 rkey     44  u32 reserved (0)
///
/// hello (once each way, in the connection's private data: the client's
/// connect request, the server's accept) reuses the fields: size = the
/// largest inline payload the sender accepts (its receive buffers, less the
/// header); credits (server only) = the calls the client may have in
/// flight; addr = the largest request (server) or response (client) it
/// takes; code = the protocol version, and in its high 16 bits the server's
/// flags (hello_deferred_credits: the credits come in a credit frame once
/// the client's receives are posted, not at once); and the server's hello
/// carries the address and rkey of its liveness word (8 bytes the client
/// reads while calls wait) in id and rkey.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace cordma::detail::rpc_wire {

inline constexpr std::uint16_t magic = 0x5052;
inline constexpr std::uint8_t version = 1;
/// A server hello's flag (code >> 16): without a shared receive queue, the
/// server posts a new client's receives after accepting it, and grants its
/// credits in a credit frame then; the client may not send before.
inline constexpr std::uint32_t hello_deferred_credits = 1;
inline constexpr std::size_t header_size = 48;

enum class frame : std::uint8_t {
    hello = 1,         ///< limits and credits, once each way
    request = 2,       ///< a call, its payload inline
    request_rts = 3,   ///< a call whose payload the server reads (addr, rkey, size)
    response = 4,      ///< an answer, its payload inline (or an error's message)
    response_rts = 5,  ///< an answer the client reads; it sends `done` after
    done = 6,          ///< the client has read a response_rts: its memory is free
    credit = 7,        ///< only `credits`
};

struct header {
    frame type = frame::request;
    std::uint32_t credits = 0;
    std::uint64_t id = 0;
    std::uint32_t code = 0;
    std::uint64_t size = 0;
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
};

/// Whether frames of `type` carry `size` bytes of payload after the header.
constexpr bool carries_payload(frame type) noexcept {
    return type == frame::request || type == frame::response;
}

void encode(const header& h, std::span<std::byte, header_size> out) noexcept;
/// The header of `frame` (all of the bytes that arrived), or nothing with
/// the reason in `why`: too short, bad magic or version, unknown type,
/// reserved bytes set, a payload length that does not match the header, a
/// rendezvous frame without a size (its key is the sender's business: a
/// forged one fails the read, which closes that connection).
std::optional<header> decode(std::span<const std::byte> frame, std::string& why);

const char* name(frame type) noexcept;

}  // namespace cordma::detail::rpc_wire
