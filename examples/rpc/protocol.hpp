#pragma once
// protocol.hpp: the wire format shared by rpc_server and rpc_client.
//
// The pattern, for copying into your own RPC over RDMA SEND/RECV:
//
// - One message is one SEND of at most max_message bytes: a 16-byte header,
//   then the payload. Both sides post receives of max_message bytes, so no
//   message is ever split or reassembled.
// - The client picks each request's id and the server copies it into the
//   response. Responses may come back in any order; the client matches them
//   to its pending calls by id.
// - Credits, because a SEND needs a receive already posted on the other side
//   (otherwise the sender's NIC retries "receiver not ready" a few times and
//   then the connection fails). The server posts `credits` receives for each
//   client as soon as it accepts it, before it does anything else. The
//   client posts its receives, then makes one call, hello (id 0), whose
//   response says how many credits it has; from then on it never has more
//   than that many requests outstanding. The server posts a receive again
//   before it sends the response that frees the client's credit, so every
//   request finds a receive waiting, and so does every response.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace rpc {

// Both sides copy structs to the wire as they are in memory. That is only a
// protocol if everyone agrees on the byte order; a real one would convert.
static_assert(std::endian::native == std::endian::little, "the rpc example assumes little-endian peers");

/// The largest message, header included. Every receive buffer is this big.
inline constexpr std::size_t max_message = 4096;

enum class method : std::uint16_t {
    hello = 0,  // the client's first call; response payload: struct hello
    echo = 1,   // the payload back, unchanged
    add = 2,    // payload: struct add_request; response: the sum, one std::int64_t
    upper = 3,  // the payload with ASCII letters in upper case
};

enum class status : std::uint16_t {
    ok = 0,
    unknown_method = 1,
    bad_request = 2,  // the payload does not fit the method
};

struct header {
    std::uint64_t id = 0;         // chosen by the client, copied into the response
    method op = method::hello;    // the request's method, also in the response
    status code = status::ok;     // responses only
    std::uint32_t length = 0;     // payload bytes after the header
};
static_assert(sizeof(header) == 16 && std::is_trivially_copyable_v<header>);

inline constexpr std::size_t max_payload = max_message - sizeof(header);

/// The payload of the hello's response.
struct hello {
    std::uint32_t credits = 0;      // requests the client may have outstanding
    std::uint32_t max_message = 0;  // the server's rpc::max_message; must match
};

/// add's request payload.
struct add_request {
    std::int64_t a = 0;
    std::int64_t b = 0;
};

/// A message that breaks the protocol. The side that gets one closes the
/// connection: a peer that sends garbage cannot be trusted with the next one.
class protocol_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline const char* to_string(method m) {
    switch (m) {
    case method::hello: return "hello";
    case method::echo: return "echo";
    case method::add: return "add";
    case method::upper: return "upper";
    }
    return "unknown";
}

inline const char* to_string(status s) {
    switch (s) {
    case status::ok: return "ok";
    case status::unknown_method: return "unknown method";
    case status::bad_request: return "bad request";
    }
    return "unknown status";
}

/// The bytes of a trivially copyable value, as a payload.
template <class T>
std::string_view as_payload(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return {reinterpret_cast<const char*>(&value), sizeof value};
}

/// A trivially copyable value read back from a payload; nullopt if the
/// payload is not exactly its size.
template <class T>
std::optional<T> from_payload(std::string_view payload) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (payload.size() != sizeof(T))
        return std::nullopt;
    T value;
    std::memcpy(&value, payload.data(), sizeof value);
    return value;
}

/// Where a message's payload goes in a send buffer: after the header. Fill it
/// in place, then call write_header.
inline std::span<char> payload_area(std::span<std::byte> buffer) {
    return {reinterpret_cast<char*>(buffer.data()) + sizeof(header), buffer.size() - sizeof(header)};
}

/// Writes `head` at the start of `buffer`, whose payload area already holds
/// head.length bytes. Returns the message's size, what to send.
inline std::size_t write_header(std::span<std::byte> buffer, const header& head) {
    if (sizeof head + head.length > buffer.size())
        throw std::length_error("rpc: a " + std::to_string(head.length) + "-byte payload does not fit in a " +
                                std::to_string(buffer.size()) + "-byte message buffer");
    std::memcpy(buffer.data(), &head, sizeof head);
    return sizeof head + head.length;
}

/// Copies `payload` after the header into `buffer` and writes the header
/// (with its length set). Returns the message's size.
inline std::size_t encode(std::span<std::byte> buffer, header head, std::string_view payload) {
    if (payload.size() > buffer.size() - sizeof head)
        throw std::length_error("rpc: a " + std::to_string(payload.size()) + "-byte payload does not fit in a " +
                                std::to_string(buffer.size()) + "-byte message buffer (max_payload " +
                                std::to_string(max_payload) + ")");
    if (!payload.empty())  // an empty view may have no data() to copy from
        std::memcpy(payload_area(buffer).data(), payload.data(), payload.size());
    head.length = static_cast<std::uint32_t>(payload.size());
    return write_header(buffer, head);
}

/// A received message. The payload points into the receive buffer: use it
/// before that buffer is posted again.
struct message {
    header head;
    std::string_view payload;
};

/// Reads the message in the `received` bytes; throws protocol_error if they
/// are not one well-formed message.
inline message decode(std::span<const std::byte> received) {
    message m;
    if (received.size() < sizeof m.head)
        throw protocol_error("rpc: a " + std::to_string(received.size()) + "-byte message is shorter than the " +
                             std::to_string(sizeof m.head) + "-byte header");
    std::memcpy(&m.head, received.data(), sizeof m.head);
    if (m.head.length != received.size() - sizeof m.head)
        throw protocol_error("rpc: message " + std::to_string(m.head.id) + " says its payload is " +
                             std::to_string(m.head.length) + " bytes, but " +
                             std::to_string(received.size() - sizeof m.head) + " arrived");
    m.payload = {reinterpret_cast<const char*>(received.data()) + sizeof m.head, m.head.length};
    return m;
}

}  // namespace rpc
