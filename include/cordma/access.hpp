#pragma once
/// Access access of a memory region or queue pair, as a type-safe bit set
/// over IBV_ACCESS_*.

#include <cordma/export.hpp>
#include <string>

#include <infiniband/verbs.h>

namespace cordma {

enum class access_flags : int {
    none = 0,
    local_write = IBV_ACCESS_LOCAL_WRITE,
    remote_write = IBV_ACCESS_REMOTE_WRITE,
    remote_read = IBV_ACCESS_REMOTE_READ,
    remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,
    /// Everything a peer may do with one-sided operations, plus local write
    /// (which the verbs require whenever remote write or atomics are given).
    all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
          IBV_ACCESS_REMOTE_ATOMIC,
};

constexpr access_flags operator|(access_flags a, access_flags b) noexcept {
    return static_cast<access_flags>(static_cast<int>(a) | static_cast<int>(b));
}
constexpr access_flags operator&(access_flags a, access_flags b) noexcept {
    return static_cast<access_flags>(static_cast<int>(a) & static_cast<int>(b));
}
constexpr bool contains(access_flags set, access_flags wanted) noexcept { return (set & wanted) == wanted; }
constexpr int to_verbs(access_flags a) noexcept { return static_cast<int>(a); }

/// "local_write|remote_read", or "none": for error messages.
CORDMA_API std::string to_string(access_flags a);

}  // namespace cordma
