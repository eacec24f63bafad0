#pragma once
/// The bounds check shared by local and remote slices.

#include <cstdint>
#include <string>

namespace cordma::detail {

[[noreturn]] void throw_slice_out_of_range(const std::string& region, std::uint64_t offset,
                                           std::uint64_t length);

/// Throws std::out_of_range unless [offset, offset + length) lies within a
/// region of `size` bytes; written so that huge values cannot overflow.
template <class Describe>
inline void check_slice(std::uint64_t size, std::uint64_t offset, std::uint64_t length, Describe&& describe) {
    if (offset > size || length > size - offset) [[unlikely]]
        throw_slice_out_of_range(describe(), offset, length);
}

}  // namespace cordma::detail
