#pragma once
/// One rdma_cm handshake for one queue pair, either side. cordma drives the
/// QP's state transitions itself (rdma_init_qp_attr, then the builder's own
/// attributes through qp_options), so every setting applies over rdma_cm as
/// over the TCP exchange, each on the side that set it.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/task.hpp>

#include "connect/qp_settings.hpp"
#include "connect/rdma_cm/cm_hello.hpp"
#include "connect/rdma_cm/cm_id.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

struct cm_link {
    std::shared_ptr<cm_id> cm;
    std::shared_ptr<queue_pair> qp;
    /// The private data of the peer's accept (plain connections).
    std::vector<std::byte> peer_private_data;
};

/// How long one attempt to resolve a peer's address may take before
/// cm_connect_qp fails with host_unreachable (and builder::connect tries
/// again, until its deadline).
inline constexpr std::chrono::milliseconds address_attempt{2000};

/// Active side: resolve, route, QP, connect with `hello`, RTR, RTS,
/// establish; all by `deadline`. Without a hello (builder::agent(false)) the
/// connect request carries settings.private_data, and the accept's private
/// data is the link's peer_private_data; with one, the accept must carry
/// cordma's reply. `establish` false leaves the last step (rdma_establish,
/// which sends the RTU) to the caller. Throws std::system_error (refused,
/// unreachable, timed out; protocol_not_supported for a peer whose
/// builder::agent differs), std::invalid_argument for a setting that
/// cannot apply.
task<cm_link> cm_connect_qp(std::shared_ptr<runtime> rt, const connection_settings& settings,
                            const socket_address& where, qp_role role, std::optional<cm_hello> hello,
                            std::chrono::steady_clock::time_point deadline, bool establish = true);

/// Passive side, for the connect request on `cm`: QP, RTR, RTS, accept
/// (with cordma's reply to a hello, else settings.private_data), wait until
/// established (bounded by connect_timeout). Rejects the request and throws
/// if any step fails.
task<std::shared_ptr<queue_pair>> cm_accept_qp(std::shared_ptr<runtime> rt, const connection_settings& settings,
                                               std::shared_ptr<cm_id> cm, qp_role role,
                                               const std::optional<cm_hello>& hello);

/// Refuses the connect request on `id` (not yet accepted) with `reason`
/// in the reject's private data.
void refuse(rdma_cm_id* id, cm_refusal::reason_type reason) noexcept;

/// The private data an event carries, as the connection keeps it.
std::vector<std::byte> private_data_of(const cm_event_copy& event);

/// "connect to 10.0.0.2:7471: ..." errors for a failed step.
[[noreturn]] void throw_connect_failure(const std::string& peer, const char* step, const cm_event_copy* event,
                                        std::chrono::milliseconds limit, const socket_address* where = nullptr);

/// The listening side's view of a new id: "10.0.0.1:50000".
std::string peer_of(rdma_cm_id* id);

}  // namespace cordma::detail
