#pragma once
/// Little-endian fields at fixed offsets: how the frame headers of the
/// link (link_wire) and of rpc (rpc_wire) are written and read, whatever
/// the host's byte order.

#include <cstddef>
#include <cstdint>

namespace cordma::detail::little_endian {

template <class T>
void put(std::byte* at, T value) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i)
        at[i] = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
}

template <class T>
T get(const std::byte* at) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
        v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
    return static_cast<T>(v);
}

}  // namespace cordma::detail::little_endian
