#pragma once
/// The torchrun-style rendezvous's wire format (rendezvous_bootstrap.hpp
/// has the conversation). Pure bytes, no Asio, so it can be tested alone.
///
/// Every frame: a 12-byte header, then `length` bytes of payload. All
/// integers little-endian, as in every cordma format (wire/byte_codec.hpp).
///
///     offset  size  field
///          0     4  magic     0x43475256 ("CGRV")
///          4     2  version   1
///          6     1  type      1 publish, 2 status, 3 list, 4 refused
///          7     1  reserved  0
///          8     4  length    payload bytes; at most max_payload(type)
///
/// Payloads:
///
///     publish (any rank -> rank 0): rank u32, world_size u32,
///         endpoint_length u16 (1..255), endpoint (printable ASCII)
///     status (rank 0 -> rank): world_size u32, then ceil(world_size/8)
///         bytes, bit r (byte r/8, bit r%8) set when rank r has published;
///         the bits past world_size zero
///     list (rank 0 -> rank): world_size u32, then world_size times
///         endpoint_length u16 (1..255), endpoint
///     refused (rank 0 -> rank): text_length u16 (<= 1024), text; rank 0
///         closes the connection after it
///
/// The header's length is checked against the type's limit before any
/// payload is read, so a garbage or hostile client can never make rank 0
/// allocate more than a publish's 265 bytes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cordma::detail {

inline constexpr std::uint32_t rendezvous_magic = 0x43475256;  // "CGRV"
inline constexpr std::uint16_t rendezvous_version = 1;
inline constexpr std::size_t rendezvous_header_size = 12;
/// Ranks are u32 on the wire; this keeps the list under 17 MiB.
inline constexpr std::uint32_t rendezvous_max_world_size = 65536;
inline constexpr std::size_t rendezvous_max_endpoint = 255;
inline constexpr std::size_t rendezvous_max_refusal = 1024;

enum class rendezvous_type : std::uint8_t { publish = 1, status = 2, list = 3, refused = 4 };

struct rendezvous_header {
    rendezvous_type type{};
    std::uint32_t length = 0;
};

struct rendezvous_publish {
    std::uint32_t rank = 0;
    std::uint32_t world_size = 0;
    std::string endpoint;
};

/// The largest payload a frame of `type` may carry.
std::size_t rendezvous_max_payload(rendezvous_type type) noexcept;

/// Checks magic, version, type, the reserved byte and the length against the
/// type's limit. Throws std::invalid_argument naming the field.
rendezvous_header decode_rendezvous_header(std::span<const std::uint8_t, rendezvous_header_size> bytes);

/// Each returns a whole frame, header included.
std::vector<std::uint8_t> encode_rendezvous_publish(const rendezvous_publish& publish);
std::vector<std::uint8_t> encode_rendezvous_status(const std::vector<bool>& published);
std::vector<std::uint8_t> encode_rendezvous_list(const std::vector<std::string>& endpoints);
std::vector<std::uint8_t> encode_rendezvous_refused(const std::string& why);

/// Each takes a payload (no header) and checks every length against the
/// payload's size; throws std::invalid_argument naming the field.
rendezvous_publish decode_rendezvous_publish(std::span<const std::uint8_t> payload);
std::vector<bool> decode_rendezvous_status(std::span<const std::uint8_t> payload);
std::vector<std::string> decode_rendezvous_list(std::span<const std::uint8_t> payload);
std::string decode_rendezvous_refused(std::span<const std::uint8_t> payload);

}  // namespace cordma::detail
