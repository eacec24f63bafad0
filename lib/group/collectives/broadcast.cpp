// group::broadcast: a binomial tree from the root. Each rank takes the
// message from its parent, then passes it to its children at once; small
// messages travel inline, large ones are read by each child from its
// parent's buffer (so log2 N hops, each an RDMA READ of the whole buffer).
#include <vector>

#include <cordma/when_all.hpp>

#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace detail {

task<void> binomial_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step) {
    const auto& c = core->current();
    int n = core->size();
    int v = relative(core->rank(), root, n);
    int below = v == 0 ? tree_top(n) : lowest_bit(v);
    if (v != 0) {
        int parent = absolute(v - below, root, n);
        co_await core->link(parent).receive(expect(*core, step, buffer.size(), static_cast<std::uint32_t>(root)),
                                            buffer, c.token);
    }
    std::vector<task<void>> sends;
    for (int mask = below >> 1; mask > 0; mask >>= 1)
        if (v + mask < n)
            sends.push_back(core->link(absolute(v + mask, root, n))
                                .send(frame_of(*core, step, static_cast<std::uint32_t>(root)), buffer, c.token));
    co_await when_all(std::move(sends));
}

}  // namespace detail

task<void> group::broadcast(local_slice buffer, int root, group_call call) {
    auto& core = checked("broadcast");
    detail::check_root("broadcast", core, root);
    detail::check_slice("broadcast", "buffer", buffer, buffer.size());
    auto shared = state_;
    co_await shared->run(detail::group_wire::collective::broadcast, std::move(call),
                         detail::binomial_broadcast(shared, buffer, root, 0));
}

}  // namespace cordma
