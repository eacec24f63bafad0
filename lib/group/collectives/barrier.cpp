// group::barrier: a dissemination barrier. In round k (k = 1, 2, 4, ...)
// rank r tells r + k and waits to hear from r - k; after ceil(log2 N)
// rounds every rank has heard, through someone, from every other.
#include "group/collectives/collective_steps.hpp"

namespace cordma {

namespace {

task<void> dissemination(std::shared_ptr<detail::group_core> core) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::uint16_t round = 0;
    for (int k = 1; k < n; k <<= 1, ++round) {
        int to = (r + k) % n, from = (r - k + n) % n;
        co_await core->link(to).send(detail::frame_of(*core, round), local_slice{}, c.token);
        co_await core->link(from).receive(detail::expect(*core, round, 0), local_slice{}, c.token);
    }
}

}  // namespace

task<void> group::barrier(group_call call) {
    checked("barrier");
    auto core = state_;
    co_await core->run(detail::collective::barrier, std::move(call), dissemination(core));
}

}  // namespace cordma
