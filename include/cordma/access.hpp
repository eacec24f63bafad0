#pragma once
/// \file
/// Access access of a memory region or queue pair, as a type-safe bit set
/// over IBV_ACCESS_*.

#include <cordma/export.hpp>
#include <string>

#include <infiniband/verbs.h>

namespace cordma {

/// What may be done to a memory region: by this side's own operations
/// (local_write: the region can be a receive or read target) and by a peer's
/// one-sided operations (remote_*). The values are the IBV_ACCESS_* bits,
/// so to_verbs() hands them to libibverbs unchanged. Combine with `|`, test
/// with contains().
enum class access_flags : int {
    /// No access beyond local reads (the region can only be a source).
    none = 0,
    /// Operations on this side may write into the region: needed by a
    /// receive buffer or a read's local target (IBV_ACCESS_LOCAL_WRITE).
    local_write = IBV_ACCESS_LOCAL_WRITE,
    /// A peer may RDMA-write into the region (IBV_ACCESS_REMOTE_WRITE).
    remote_write = IBV_ACCESS_REMOTE_WRITE,
    /// A peer may RDMA-read from the region (IBV_ACCESS_REMOTE_READ).
    remote_read = IBV_ACCESS_REMOTE_READ,
    /// A peer may fetch_add and compare_swap on 8-byte aligned words of the
    /// region (IBV_ACCESS_REMOTE_ATOMIC).
    remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,
    /// Everything a peer may do with one-sided operations, plus local write
    /// (which the verbs require whenever remote write or atomics are given).
    all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
          IBV_ACCESS_REMOTE_ATOMIC,
};

/// The union of two sets of access: `access_flags::remote_read | access_flags::remote_write`.
constexpr access_flags operator|(access_flags a, access_flags b) noexcept {
    return static_cast<access_flags>(static_cast<int>(a) | static_cast<int>(b));
}
/// The access both sets hold.
constexpr access_flags operator&(access_flags a, access_flags b) noexcept {
    return static_cast<access_flags>(static_cast<int>(a) & static_cast<int>(b));
}
/// True if `set` holds every right in `wanted` (so contains(x, none) is
/// always true).
constexpr bool contains(access_flags set, access_flags wanted) noexcept { return (set & wanted) == wanted; }
/// The IBV_ACCESS_* bits, for ibv_reg_mr and ibv_modify_qp.
constexpr int to_verbs(access_flags a) noexcept { return static_cast<int>(a); }

/// "local_write|remote_read", or "none": for error messages.
CORDMA_API std::string to_string(access_flags a);

}  // namespace cordma
