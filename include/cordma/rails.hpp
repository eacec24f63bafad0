#pragma once
/// \file
/// Rails: one connection over several RDMA devices at once
/// (builder::rails). Rail 0 is the builder's device, where every
/// connection is set up; rails 1.. are the others, in the order given.
/// Memory from a builder's pool is registered on every rail's protection
/// domain, so a slice of it carries a key for each rail (local_slice::
/// remote(), remote_slice::rail_rkeys).

#include <cstddef>

namespace cordma {

/// The most rails one builder (and so one connection) may have.
inline constexpr std::size_t max_rails = 4;

}  // namespace cordma
