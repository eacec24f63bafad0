#pragma once
/// Forming a group's mesh: every connection to a lower rank and from a
/// higher one at once, each confirmed by a hello each way (who is on each
/// end, the group's id and shape), all within the formation deadline.

#include <chrono>
#include <memory>

#include <string>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

class group_core;

/// Links every other rank to `core`, or throws group_error naming the ranks
/// that never came by `deadline`.
task<void> form_mesh(std::shared_ptr<group_core> core, listener incoming,
                     std::chrono::steady_clock::time_point deadline);

/// The IPv4 address of the builder's device (its RoCE v2 GID's): where a
/// rank listens when a launcher gives no address.
std::string device_ipv4(cordma::builder& b);

}  // namespace cordma::detail
