// group::gather: every rank sends its block to the root, which takes them
// all at once into its blocks.
#include <cstring>

#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace {

task<void> to_root(std::shared_ptr<detail::group_core> core, local_slice send, local_slice recv, int root) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t block = send.size();
    auto root_tag = static_cast<std::uint32_t>(root);
    if (r != root) {
        co_await core->link(root).send(detail::frame_of(*core, 0, root_tag), send, c.token);
        co_return;
    }
    if (block != 0)
        std::memcpy(recv.data() + static_cast<std::size_t>(r) * block, send.data(), block);
    detail::fan_out steps(core->fan());
    for (int p = 0; p < n; ++p)
        if (p != r)
            steps.add(core->link(p).receive(detail::expect(*core, 0, block, root_tag),
                                            recv.slice(static_cast<std::size_t>(p) * block, block), c.token));
    co_await steps;
}

}  // namespace

task<void> group::gather(local_slice send, local_slice recv, int root, group_call call) {
    auto& core = checked("gather");
    detail::check_root("gather", core, root);
    detail::check_slice("gather", "send", send, send.size());
    if (core.rank() == root) {
        detail::check_slice("gather", "recv", recv, send.size() * static_cast<std::size_t>(core.size()));
        if (detail::overlap(send, recv))
            detail::bad_argument("gather", "send and recv overlap on the root; give separate buffers");
    }
    auto shared = state_;
    co_await shared->run(detail::collective::gather, std::move(call), to_root(shared, send, recv, root));
}

}  // namespace cordma
