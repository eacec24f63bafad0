// group::scatter: the root sends block p to rank p, all at once.
#include <cstring>

#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace {

task<void> from_root(std::shared_ptr<detail::group_core> core, local_slice send, local_slice recv, int root) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t block = recv.size();
    auto root_tag = static_cast<std::uint32_t>(root);
    if (r != root) {
        co_await core->link(root).receive(detail::expect(*core, 0, block, root_tag), recv, c.token);
        co_return;
    }
    if (block != 0)
        std::memcpy(recv.data(), send.data() + static_cast<std::size_t>(r) * block, block);
    detail::fan_out steps(core->fan());
    for (int p = 0; p < n; ++p)
        if (p != r)
            steps.add(core->link(p).send(detail::frame_of(*core, 0, root_tag),
                                         send.slice(static_cast<std::size_t>(p) * block, block), c.token));
    co_await steps;
}

}  // namespace

task<void> group::scatter(local_slice send, local_slice recv, int root, group_call call) {
    auto& core = checked("scatter");
    detail::check_root("scatter", core, root);
    detail::check_slice("scatter", "recv", recv, recv.size());
    if (core.rank() == root) {
        detail::check_slice("scatter", "send", send, recv.size() * static_cast<std::size_t>(core.size()));
        if (detail::overlap(send, recv))
            detail::bad_argument("scatter", "send and recv overlap on the root; give separate buffers");
    }
    auto shared = state_;
    co_await shared->run(detail::collective::scatter, std::move(call),
                         from_root(shared, send, recv, root));
}

}  // namespace cordma
