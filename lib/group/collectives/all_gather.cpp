// group::all_gather: every rank sends its block to every other at once and
// takes theirs into its own blocks (large blocks are read straight out of
// each sender's buffer, so a block crosses the wire once per receiver).
#include <cstring>

#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace {

task<void> gather_all(std::shared_ptr<detail::group_core> core, local_slice send, local_slice recv) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t block = send.size();
    if (block != 0 && recv.data() + static_cast<std::size_t>(r) * block != send.data())
        std::memcpy(recv.data() + static_cast<std::size_t>(r) * block, send.data(), block);
    detail::fan_out steps(core->fan());
    for (int p = 0; p < n; ++p) {
        if (p == r)
            continue;
        steps.add(core->link(p).send(detail::frame_of(*core, 0), send, c.token));
        steps.add(core->link(p).receive(detail::expect(*core, 0, block),
                                      recv.slice(static_cast<std::size_t>(p) * block, block), c.token));
    }
    co_await steps;
}

}  // namespace

task<void> group::all_gather(local_slice send, local_slice recv, group_call call) {
    auto& core = checked("all_gather");
    detail::check_slice("all_gather", "send", send, send.size());
    detail::check_slice("all_gather", "recv", recv, send.size() * static_cast<std::size_t>(core.size()));
    auto shared = state_;
    co_await shared->run(detail::collective::all_gather, std::move(call), gather_all(shared, send, recv));
}

}  // namespace cordma
