#pragma once
/// A group's collectives as its links carry them: each one's number in the
/// op range the link leaves to its owner (link_wire::module_op), and its
/// name in errors. The numbers are on the wire (docs/group.md): keep them.

#include <cstdint>
#include <string>

#include "link/link_wire.hpp"

namespace cordma::detail {

enum class collective : std::uint8_t {
    barrier = 1,
    broadcast = 2,
    all_to_all = 3,
    all_gather = 4,
    gather = 5,
    scatter = 6,
    reduce = 7,
    all_reduce = 8,
};
static_assert(link_wire::is_module_op(link_wire::module_op(static_cast<std::uint8_t>(collective::barrier))) &&
              link_wire::is_module_op(link_wire::module_op(static_cast<std::uint8_t>(collective::all_reduce))));

/// The op byte of `c`'s frames.
constexpr link_wire::op op_of(collective c) noexcept { return link_wire::module_op(static_cast<std::uint8_t>(c)); }

/// "barrier", "all_reduce", ...: as group.hpp spells the call.
inline const char* collective_name(collective c) noexcept {
    switch (c) {
    case collective::barrier: return "barrier";
    case collective::broadcast: return "broadcast";
    case collective::all_to_all: return "all_to_all";
    case collective::all_gather: return "all_gather";
    case collective::gather: return "gather";
    case collective::scatter: return "scatter";
    case collective::reduce: return "reduce";
    case collective::all_reduce: return "all_reduce";
    }
    return "?";
}

/// An op byte as a group names it: a collective's name, or the link's.
inline std::string group_op_name(link_wire::op o) {
    if (link_wire::is_module_op(o))
        return collective_name(static_cast<collective>(o));
    return link_wire::name(o);
}

}  // namespace cordma::detail
