// group::all_to_all: rank r's block p goes to rank p. Pairwise (the
// default): every send and receive at once. Sequential (rdma_lib's order):
// in step s, send to r + s and receive from r - s, one step at a time.
#include <cstring>

#include <cordma/when_all.hpp>

#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace {

task<void> exchange(std::shared_ptr<detail::group_core> core, local_slice send, local_slice recv,
                    all_to_all_order order) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t block = send.size() / static_cast<std::size_t>(n);
    auto at = [block](const local_slice& s, int p) { return s.slice(static_cast<std::size_t>(p) * block, block); };
    if (block != 0)
        std::memcpy(at(recv, r).data(), at(send, r).data(), block);
    if (order == all_to_all_order::pairwise) {
        detail::fan_out steps(core->fan());
        for (int p = 0; p < n; ++p) {
            if (p == r)
                continue;
            steps.add(core->link(p).send(detail::frame_of(*core, 0), at(send, p), c.token));
            steps.add(core->link(p).receive(detail::expect(*core, 0, block), at(recv, p), c.token));
        }
        co_await steps;
        co_return;
    }
    for (int s = 1; s < n; ++s) {
        int to = (r + s) % n, from = (r - s + n) % n;
        co_await when_all(core->link(to).send(detail::frame_of(*core, 0), at(send, to), c.token),
                          core->link(from).receive(detail::expect(*core, 0, block), at(recv, from), c.token));
    }
}

}  // namespace

task<void> group::all_to_all(local_slice send, local_slice recv, all_to_all_order order, group_call call) {
    auto& core = checked("all_to_all");
    std::size_t n = static_cast<std::size_t>(core.size());
    if (send.size() % n != 0)
        detail::bad_argument("all_to_all", "send is " + std::to_string(send.size()) +
                                               " bytes, not a whole number of blocks for " + std::to_string(n) +
                                               " ranks");
    detail::check_slice("all_to_all", "send", send, send.size());
    detail::check_slice("all_to_all", "recv", recv, send.size());
    if (detail::overlap(send, recv))
        detail::bad_argument("all_to_all", "send and recv overlap; give separate buffers");
    auto shared = state_;
    co_await shared->run(detail::collective::all_to_all, std::move(call),
                         exchange(shared, send, recv, order));
}

}  // namespace cordma
