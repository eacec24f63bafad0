// group::broadcast. Small messages (inline, up to the eager size) in small
// groups (up to flat_limit ranks): the root sends to every rank at once,
// one hop, since on these links a hop costs far more than the root's extra
// copies. Otherwise a binomial tree from the root: each rank takes the
// message from its parent, then passes it to its children at once; large
// messages are read by each child from its parent's buffer (log2 N hops,
// each an RDMA READ of the whole buffer).

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
    fan_out sends(core->fan());
    for (int mask = below >> 1; mask > 0; mask >>= 1)
        if (v + mask < n)
            sends.add(core->link(absolute(v + mask, root, n))
                          .send(frame_of(*core, step, static_cast<std::uint32_t>(root)), buffer, c.token));
    co_await sends;
}

task<void> flat_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step) {
    const auto& c = core->current();
    auto root_tag = static_cast<std::uint32_t>(root);
    if (core->rank() != root) {
        co_await core->link(root).receive(expect(*core, step, buffer.size(), root_tag), buffer, c.token);
        co_return;
    }
    fan_out sends(core->fan());
    for (int p = 0; p < core->size(); ++p)
        if (p != root)
            sends.add(core->link(p).send(frame_of(*core, step, root_tag), buffer, c.token));
    co_await sends;
}

task<void> any_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step) {
    if (core->size() <= flat_limit && buffer.size() <= core->options().eager_size)
        co_await flat_broadcast(std::move(core), buffer, root, step);
    else
        co_await binomial_broadcast(std::move(core), buffer, root, step);
}

}  // namespace detail

task<void> group::broadcast(local_slice buffer, int root, group_call call) {
    auto& core = checked("broadcast");
    detail::check_root("broadcast", core, root);
    detail::check_slice("broadcast", "buffer", buffer, buffer.size());
    auto shared = state_;
    co_await shared->run(detail::collective::broadcast, std::move(call),
                         detail::any_broadcast(shared, buffer, root, 0));
}

}  // namespace cordma
