// group::reduce and all_reduce. reduce: a binomial tree towards the root;
// each rank folds its children's partial results into its own (children
// in a fixed order, so floating-point results are the same on every run),
// then sends the result to its parent. all_reduce: reduce to rank 0, then
// broadcast from it.
#include <cstring>

#include "group/collectives/collective_steps.hpp"
#include "group/collectives/reduction.hpp"

namespace cordma {

namespace detail {

task<void> binomial_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step);

namespace {

/// Steps of reduce are the tree level (0, 1, ...); all_reduce's broadcast
/// uses this step, so the two phases can never be taken for each other.
constexpr std::uint16_t broadcast_step = 0x8000;

std::uint32_t reduce_tag(element_type type, reduce_op op) {
    return static_cast<std::uint32_t>(type) << 8 | static_cast<std::uint32_t>(op);
}

/// Reduces every rank's `send` into `result` on `root` (elsewhere `result`
/// is ignored; partial results live in the group's scratch memory).
task<void> tree_reduce(std::shared_ptr<group_core> core, local_slice send, local_slice result, element_type type,
                       reduce_op op, int root) {
    const auto& c = core->current();
    int n = core->size();
    std::size_t size = send.size();
    std::uint32_t tag = reduce_tag(type, op);
    int v = relative(core->rank(), root, n);
    local_slice scratch = core->scratch(2 * size);
    local_slice acc = v == 0 ? result : scratch.slice(0, size);
    local_slice incoming = scratch.slice(size, size);
    if (size != 0 && acc.data() != send.data())
        std::memmove(acc.data(), send.data(), size);
    std::uint16_t level = 0;
    for (int mask = 1; mask < n; mask <<= 1, ++level) {
        if (v & mask) {
            int parent = absolute(v - mask, root, n);
            co_await core->link(parent).send(frame_of(*core, level, static_cast<std::uint32_t>(root), tag), acc,
                                             c.token);
            co_return;
        }
        if (v + mask >= n)
            continue;
        peer_link& child = core->link(absolute(v + mask, root, n));
        inbound_frame f =
            co_await child.take(expect(*core, level, size, static_cast<std::uint32_t>(root), tag), c.token);
        const std::byte* in = f.message.data() + group_wire::header_size;
        if (f.header.type == group_wire::frame::rts) {
            co_await child.fetch(f, incoming);
            in = incoming.data();
        }
        combine(type, op, acc.data(), in, size);
        child.finish(f);
    }
}

task<void> reduce_then_broadcast(std::shared_ptr<group_core> core, local_slice send, local_slice recv,
                                 element_type type, reduce_op op) {
    co_await tree_reduce(core, send, recv, type, op, 0);
    co_await binomial_broadcast(core, recv, 0, broadcast_step);
}

void check_reduction(const char* call, const group_core& core, const local_slice& send, const local_slice& recv,
                     element_type type, bool needs_recv) {
    std::size_t element = element_size(type);
    if (send.size() % element != 0)
        bad_argument(call, "send is " + std::to_string(send.size()) + " bytes, not a whole number of " +
                               element_name(type) + "s (" + std::to_string(element) + " bytes each)");
    check_slice(call, "send", send, send.size());
    if (needs_recv) {
        check_slice(call, "recv", recv, send.size());
        if (overlap(send, recv) && send.data() != recv.data())
            bad_argument(call, "send and recv overlap without being the same buffer");
    }
    (void)core;
}

}  // namespace
}  // namespace detail

task<void> group::reduce(local_slice send, local_slice recv, element_type type, reduce_op op, int root,
                         group_call call) {
    auto& core = checked("reduce");
    detail::check_root("reduce", core, root);
    detail::check_reduction("reduce", core, send, recv, type, core.rank() == root);
    auto shared = state_;
    co_await shared->run(detail::group_wire::collective::reduce, std::move(call),
                         detail::tree_reduce(shared, send, recv, type, op, root));
}

task<void> group::all_reduce(local_slice send, local_slice recv, element_type type, reduce_op op, group_call call) {
    auto& core = checked("all_reduce");
    detail::check_reduction("all_reduce", core, send, recv, type, true);
    auto shared = state_;
    co_await shared->run(detail::group_wire::collective::all_reduce, std::move(call),
                         detail::reduce_then_broadcast(shared, send, recv, type, op));
}

}  // namespace cordma
