#pragma once
/// The one byte codec of every format cordma puts on the wire
/// (docs/wire-formats.md): fixed-width unsigned integers, little-endian,
/// written and read front to back. A little-endian host (every host cordma
/// runs on) stores and loads them as they are; another host swaps bytes.
///
/// Both cursors check bounds: running off the end throws std::out_of_range,
/// which is a bug in the format's code (a decoder checks the length a peer
/// sent before it reads what that length promises), never something a
/// peer's bytes can reach. Header-only, so that a decoder and its fuzz
/// target build from the decoder's own file and this one.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace cordma::detail {

/// `value` as sizeof(T) little-endian bytes at `at`.
template <class T>
void store_le(std::byte* at, T value) noexcept {
    static_assert(std::is_unsigned_v<T>);
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(at, &value, sizeof value);
    } else {
        for (std::size_t i = 0; i < sizeof value; ++i)
            at[i] = static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * i));
    }
}

/// The sizeof(T) little-endian bytes at `at`.
template <class T>
T load_le(const std::byte* at) noexcept {
    static_assert(std::is_unsigned_v<T>);
    T value;
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&value, at, sizeof value);
    } else {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < sizeof value; ++i)
            v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
        value = static_cast<T>(v);
    }
    return value;
}

namespace byte_codec {
[[noreturn]] inline void overrun(const char* cursor, std::size_t wanted, std::size_t at, std::size_t size) {
    throw std::out_of_range(std::string(cursor) + ": " + std::to_string(wanted) + " bytes at offset " +
                            std::to_string(at) + " of a " + std::to_string(size) + "-byte buffer (internal error)");
}
}  // namespace byte_codec

/// Writes fields front to back into a buffer the caller sized.
class byte_writer {
public:
    explicit byte_writer(std::span<std::byte> out) noexcept : out_(out) {}
    explicit byte_writer(std::span<std::uint8_t> out) noexcept : out_(std::as_writable_bytes(out)) {}

    void u8(std::uint8_t v) { store_le(take(1), v); }
    void u16(std::uint16_t v) { store_le(take(2), v); }
    void u32(std::uint32_t v) { store_le(take(4), v); }
    void u64(std::uint64_t v) { store_le(take(8), v); }
    /// `n` zero bytes: a reserved field.
    void zeros(std::size_t n) {
        std::byte* at = take(n);
        if (n != 0)
            std::memset(at, 0, n);
    }
    /// Raw bytes as they are (a GID, text).
    void bytes(std::span<const std::byte> b) {
        std::byte* at = take(b.size());
        if (!b.empty())
            std::memcpy(at, b.data(), b.size());
    }
    void bytes(std::string_view s) { bytes(std::as_bytes(std::span<const char>(s.data(), s.size()))); }
    std::size_t written() const noexcept { return at_; }

private:
    std::byte* take(std::size_t n) {
        if (out_.size() - at_ < n)
            byte_codec::overrun("byte_writer", n, at_, out_.size());
        std::byte* at = out_.data() + at_;
        at_ += n;
        return at;
    }

    std::span<std::byte> out_;
    std::size_t at_ = 0;
};

/// Reads fields front to back from bytes a peer sent.
class byte_reader {
public:
    explicit byte_reader(std::span<const std::byte> in) noexcept : in_(in) {}
    explicit byte_reader(std::span<const std::uint8_t> in) noexcept : in_(std::as_bytes(in)) {}

    std::uint8_t u8() { return load_le<std::uint8_t>(take(1)); }
    std::uint16_t u16() { return load_le<std::uint16_t>(take(2)); }
    std::uint32_t u32() { return load_le<std::uint32_t>(take(4)); }
    std::uint64_t u64() { return load_le<std::uint64_t>(take(8)); }
    /// The next `n` bytes as they are.
    std::span<const std::byte> bytes(std::size_t n) {
        const std::byte* at = take(n);
        return {at, n};
    }
    /// The next N bytes, copied (a fixed-size field: a trace id).
    template <std::size_t N>
    std::array<std::byte, N> array() {
        std::array<std::byte, N> out;
        std::memcpy(out.data(), take(N), N);
        return out;
    }
    std::string text(std::size_t n) {
        auto b = bytes(n);
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }
    std::size_t consumed() const noexcept { return at_; }
    std::size_t remaining() const noexcept { return in_.size() - at_; }

private:
    const std::byte* take(std::size_t n) {
        if (in_.size() - at_ < n)
            byte_codec::overrun("byte_reader", n, at_, in_.size());
        const std::byte* at = in_.data() + at_;
        at_ += n;
        return at;
    }

    std::span<const std::byte> in_;
    std::size_t at_ = 0;
};

}  // namespace cordma::detail
