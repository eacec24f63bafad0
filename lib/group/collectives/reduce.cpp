// group::reduce and all_reduce. reduce: a binomial tree towards the root;
// each rank folds its children's partial results into its own (children
// in a fixed order, so floating-point results are the same on every run),
// then sends the result to its parent. all_reduce, by size and group size:
// - inline sizes (up to the eager size) in groups of up to flat_limit:
//   every rank sends to rank 0, which folds them in rank order and sends
//   the result to every rank (two hops, each one-way);
// - other sizes below ring_threshold, with N a power of two: recursive doubling
//   (in step k, exchange partial results with rank r xor 2^k and fold;
//   log2 N steps, and every rank ends with the same bits, as a op b ==
//   b op a for sum, min and max);
// - from ring_threshold bytes, with at least N elements: a ring
//   (reduce-scatter, then all-gather, N - 1 steps each, each moving 1/N of
//   the buffer: every rank sends 2 (N - 1) / N of it, whatever N);
// - otherwise: reduce to rank 0, then broadcast from it.
#include <cstring>

#include <cordma/when_all.hpp>

#include "group/collectives/collective_steps.hpp"
#include "group/collectives/reduction.hpp"

namespace cordma {

namespace detail {

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
        const std::byte* in = nullptr;
        if (f.header.type == link_wire::frame::rts) {
            co_await child.fetch(f, incoming);
            in = incoming.data();
        } else {
            in = link_wire::payload(f.message.bytes(), f.header).data();
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

/// Every rank's part to rank 0 at once; rank 0 folds them in rank order
/// as they are taken, then sends the result to everyone at once.
task<void> flat_all_reduce(std::shared_ptr<group_core> core, local_slice send, local_slice recv,
                           element_type type, reduce_op op) {
    const auto& c = core->current();
    int n = core->size();
    std::size_t size = send.size();
    std::uint32_t tag = reduce_tag(type, op);
    if (core->rank() != 0) {
        co_await core->link(0).send(frame_of(*core, 0, 0, tag), send, c.token);
    } else {
        if (size != 0 && recv.data() != send.data())
            std::memmove(recv.data(), send.data(), size);
        local_slice incoming;  // for a part that came as an rts (the link's receives not grown yet)
        for (int p = 1; p < n; ++p) {
            peer_link& from = core->link(p);
            inbound_frame f = co_await from.take(expect(*core, 0, size, 0, tag), c.token);
            const std::byte* in = nullptr;
            if (f.header.type == link_wire::frame::rts) {
                if (!incoming.block())
                    incoming = core->scratch(size);
                co_await from.fetch(f, incoming);
                in = incoming.data();
            } else {
                in = link_wire::payload(f.message.bytes(), f.header).data();
            }
            combine(type, op, recv.data(), in, size);
            from.finish(f);
        }
    }
    co_await flat_broadcast(core, recv, 0, broadcast_step);
}

/// Steps of the ring's all-gather phase (its reduce-scatter uses 0..N-2).
constexpr std::uint16_t ring_gather_step = 0x4000;

task<void> recursive_doubling(std::shared_ptr<group_core> core, local_slice send, local_slice recv,
                              element_type type, reduce_op op) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t size = send.size();
    std::uint32_t tag = reduce_tag(type, op);
    if (size != 0 && recv.data() != send.data())
        std::memmove(recv.data(), send.data(), size);
    local_slice incoming = core->scratch(size);
    std::uint16_t step = 0;
    for (int mask = 1; mask < n; mask <<= 1, ++step) {
        peer_link& partner = core->link(r ^ mask);
        // The partner reads recv while this rank reads its: fold only once
        // both transfers are done.
        co_await when_all(partner.send(frame_of(*core, step, 0, tag), recv, c.token),
                          partner.receive(expect(*core, step, size, 0, tag), incoming, c.token));
        combine(type, op, recv.data(), incoming.data(), size);
    }
}

task<void> ring(std::shared_ptr<group_core> core, local_slice send, local_slice recv, element_type type,
                reduce_op op) {
    const auto& c = core->current();
    int n = core->size(), r = core->rank();
    std::size_t size = send.size(), element = element_size(type);
    std::uint32_t tag = reduce_tag(type, op);
    if (size != 0 && recv.data() != send.data())
        std::memmove(recv.data(), send.data(), size);
    // Chunk i: elements [i * count / n, (i + 1) * count / n).
    std::size_t count = size / element;
    auto chunk = [&](int i) {
        auto k = static_cast<std::size_t>((i % n + n) % n);
        std::size_t begin = k * count / static_cast<std::size_t>(n) * element;
        std::size_t end = (k + 1) * count / static_cast<std::size_t>(n) * element;
        return recv.slice(begin, end - begin);
    };
    peer_link& right = core->link((r + 1) % n);
    peer_link& left = core->link((r - 1 + n) % n);
    std::size_t largest = (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n) * element;
    local_slice incoming = core->scratch(largest);
    // Reduce-scatter: after step s, chunk r - s - 1 holds s + 2 ranks' parts;
    // after N - 1 steps, chunk r + 1 holds everyone's.
    for (int s = 0; s < n - 1; ++s) {
        local_slice out = chunk(r - s), in = chunk(r - s - 1);
        auto step = static_cast<std::uint16_t>(s);
        local_slice landing = incoming.slice(0, in.size());
        co_await when_all(right.send(frame_of(*core, step, 0, tag), out, c.token),
                          left.receive(expect(*core, step, in.size(), 0, tag), landing, c.token));
        combine(type, op, in.data(), landing.data(), in.size());
    }
    // All-gather: pass the finished chunks round.
    for (int s = 0; s < n - 1; ++s) {
        local_slice out = chunk(r + 1 - s), in = chunk(r - s);
        auto step = static_cast<std::uint16_t>(ring_gather_step + s);
        co_await when_all(right.send(frame_of(*core, step, 0, tag), out, c.token),
                          left.receive(expect(*core, step, in.size(), 0, tag), in, c.token));
    }
}

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

/// From this size all_reduce uses the ring (if there are enough elements).
constexpr std::size_t ring_threshold = 64 * 1024;

task<void> choose_all_reduce(std::shared_ptr<group_core> core, local_slice send, local_slice recv,
                             element_type type, reduce_op op) {
    int n = core->size();
    std::size_t count = send.size() / element_size(type);
    if (n == 1) {
        if (send.size() != 0 && recv.data() != send.data())
            std::memmove(recv.data(), send.data(), send.size());
        co_return;
    }
    if (n <= flat_limit && send.size() <= core->options().eager_size)
        co_await flat_all_reduce(core, send, recv, type, op);
    else if (send.size() >= ring_threshold && count >= static_cast<std::size_t>(n))
        co_await ring(core, send, recv, type, op);
    else if (power_of_two(n))
        co_await recursive_doubling(core, send, recv, type, op);
    else
        co_await reduce_then_broadcast(core, send, recv, type, op);
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
    co_await shared->run(detail::collective::reduce, std::move(call),
                         detail::tree_reduce(shared, send, recv, type, op, root));
}

task<void> group::all_reduce(local_slice send, local_slice recv, element_type type, reduce_op op, group_call call) {
    auto& core = checked("all_reduce");
    detail::check_reduction("all_reduce", core, send, recv, type, true);
    auto shared = state_;
    co_await shared->run(detail::collective::all_reduce, std::move(call),
                         detail::choose_all_reduce(shared, send, recv, type, op));
}

}  // namespace cordma
