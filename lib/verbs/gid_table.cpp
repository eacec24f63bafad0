// One port's valid GID entries (gid_table.hpp).
#include "verbs/gid_table.hpp"

#include <algorithm>

namespace cordma::detail {

std::vector<ibv_gid_entry> gid_entries(ibv_context* context, std::uint8_t port, int gid_tbl_len, int ports) {
    std::vector<ibv_gid_entry> out;
    if (gid_tbl_len <= 0)
        return out;
    // The whole device's table: every port's entries, as many as
    // gid_tbl_len each at most (rdma-core refuses a smaller array).
    std::vector<ibv_gid_entry> all(static_cast<std::size_t>(gid_tbl_len) * static_cast<std::size_t>(std::max(ports, 1)));
    ssize_t n = ibv_query_gid_table(context, all.data(), all.size(), 0);
    if (n >= 0) {
        for (ssize_t i = 0; i < n; ++i)
            if (all[static_cast<std::size_t>(i)].port_num == port)
                out.push_back(all[static_cast<std::size_t>(i)]);
        std::sort(out.begin(), out.end(),
                  [](const ibv_gid_entry& a, const ibv_gid_entry& b) { return a.gid_index < b.gid_index; });
        return out;
    }
    // A kernel without the table query: one slot at a time.
    for (int index = 0; index < gid_tbl_len; ++index) {
        ibv_gid_entry entry{};
        if (ibv_query_gid_ex(context, port, static_cast<std::uint32_t>(index), &entry, 0) == 0)
            out.push_back(entry);  // else an empty slot
    }
    return out;
}

}  // namespace cordma::detail
