/// The valid entries of one port's GID table, in one call.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace cordma::detail {

/// Every valid GID entry of `port` (gid_tbl_len entries long), in index
/// order. One ibv_query_gid_table call (one ioctl) where the kernel has it;
/// else one ibv_query_gid_ex per index. Why: rxe's table has 1,024 slots,
/// nearly all empty, and a connection that looked each one up spent about
/// a thousand failing ioctls choosing its GID (in a TCG VM, most of a
/// connection's CPU time in a storm).
std::vector<ibv_gid_entry> gid_entries(ibv_context* context, std::uint8_t port, int gid_tbl_len, int ports);

}  // namespace cordma::detail
