#pragma once
/// What every collective shares: the frame a step sends or expects, and
/// the checks of its arguments (before anything is sent, so a bad call
/// throws std::invalid_argument and leaves the group as it was).

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cordma/group.hpp>
#include <cordma/local_mr.hpp>

#include "group/group_core.hpp"
#include "link/link_wire.hpp"
#include "link/peer_link.hpp"

namespace cordma::detail {

/// The header of a frame this rank sends in the collective in progress.
inline link_wire::header frame_of(const group_core& core, std::uint16_t step, std::uint32_t root = 0,
                                   std::uint32_t extra = 0) {
    link_wire::header h;
    h.op = core.current().op;
    h.seq = core.current().seq;
    h.step = step;
    h.root = root;
    h.extra = extra;
    h.trace = core.current().trace;
    return h;
}

/// What this rank expects a peer to send in the collective in progress.
inline expected_frame expect(const group_core& core, std::uint16_t step, std::uint64_t size, std::uint32_t root = 0,
                             std::uint32_t extra = 0) {
    return {core.current().op, core.current().seq, step, root, extra, size};
}

[[noreturn]] inline void bad_argument(const char* call, const std::string& why) {
    throw std::invalid_argument(std::string("cordma::group::") + call + ": " + why);
}

inline void check_root(const char* call, const group_core& core, int root) {
    if (root < 0 || root >= core.size())
        bad_argument(call, "root " + std::to_string(root) + " is not a rank of this group of " +
                               std::to_string(core.size()));
}

/// `s` must be `size` bytes of registered memory (empty is fine for 0).
inline void check_slice(const char* call, const char* name, const local_slice& s, std::size_t size) {
    if (s.size() != size)
        bad_argument(call, std::string(name) + " is " + std::to_string(s.size()) + " bytes; it must be " +
                               std::to_string(size));
    if (size != 0 && !s.block())
        bad_argument(call, std::string(name) + " is not registered memory (use group::allocate or the builder's pool)");
}

inline bool overlap(const local_slice& a, const local_slice& b) {
    return a.size() != 0 && b.size() != 0 && a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

/// Up to this many ranks, small messages go straight to (or from) every
/// rank at once instead of up and down a tree.
inline constexpr int flat_limit = 8;

/// The broadcasts reduce.cpp reuses (broadcast.cpp): any_broadcast picks
/// flat or binomial by size and group size, as group::broadcast does.
task<void> binomial_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step);
task<void> flat_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step);
task<void> any_broadcast(std::shared_ptr<group_core> core, local_slice buffer, int root, std::uint16_t step);

/// The binomial tree over ranks relative to `root`: rank v's parent is v
/// without its lowest set bit, its children v + 2^k for every 2^k below
/// that bit.
inline int relative(int rank, int root, int n) { return (rank - root + n) % n; }
inline int absolute(int vrank, int root, int n) { return (vrank + root) % n; }
inline int lowest_bit(int v) { return v & -v; }
inline int tree_top(int n) {
    int top = 1;
    while (top < n)
        top <<= 1;
    return top;
}

}  // namespace cordma::detail
