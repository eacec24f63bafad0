#pragma once
/// Rank 0's half of the torchrun-style rendezvous (rendezvous_bootstrap.hpp
/// has the conversation, rendezvous_message.hpp the bytes).

#include <chrono>
#include <string>
#include <vector>

#include <cordma/address.hpp>

namespace cordma::detail {

/// Listens on port `listen.port` of every address of `listen.host`'s family
/// (as torchrun's store does), takes one publish from each of ranks
/// 1..world_size-1 and, once all are in, sends each the whole list (rank 0's
/// `own_endpoint` first) and returns it. Blocks, running its own io_context
/// on the calling thread, until then or `deadline`; then throws
/// group_error(timed_out) naming the ranks that never published. Clients
/// that send garbage, a truncated frame, a rank that is taken or another
/// world size are closed (after a refused frame when they speak the
/// protocol) with a line on stderr; they never stop the others. `where`
/// names the rendezvous in messages ("MASTER_ADDR:MASTER_PORT 10.0.0.1:29500").
std::vector<std::string> serve_rendezvous(const host_port& listen, int world_size, const std::string& own_endpoint,
                                          std::chrono::steady_clock::time_point deadline, const std::string& where);

}  // namespace cordma::detail
