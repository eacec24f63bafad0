#pragma once
/// The one place a connection is put together, whatever set it up (rdma_cm
/// connect or accept, the TCP exchange, loopback, new_connection): the data
/// QP and what watches the peer become a connection state, and for a cordma
/// peer an agent whose control QP is attached now or, over rdma_cm's second
/// handshake, a moment later.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cordma/agent_limits.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

class transport;
class shared_receive_state;
class agent_ledger;

struct connection_parts {
    std::shared_ptr<cordma::event_listener> event_listener;
    std::shared_ptr<queue_pair> data;
    std::string peer;
    /// Where the connection's atomic result slots come from (runtime::
    /// results_pool).
    std::shared_ptr<memory_pool> results_pool;
    /// What carried the set-up and watches the peer (null for loopback).
    std::shared_ptr<transport> watcher;
    /// The pool the agent serves requests from; null: no agent
    /// (builder::agent(false)).
    std::shared_ptr<memory_pool> agent_pool;
    agent_limits limits{};
    /// The default deadline of agent calls (builder::agent_timeout).
    std::chrono::milliseconds agent_timeout{30'000};
    /// What each peer host holds over all connections of the builder (null:
    /// the agent keeps its own).
    std::shared_ptr<agent_ledger> ledger;
    /// How to open another QP to the same peer (the connecting side only).
    std::function<task<connection>()> reopen;
    /// The shared receive queue the data QP receives through
    /// (builder::shared_receives), or null.
    std::shared_ptr<shared_receive_state> shared_receives;
    /// The private data the peer sent (connections without an agent).
    std::vector<std::byte> peer_private_data;
};

struct runtime;

/// The parts every transport fills alike: `rt`'s event listener, the data
/// QP, the peer's name, what watches it, the shared receive queue, and,
/// for a peer with the agent (`with_agent`), the agent's pool, limits,
/// deadline and ledger from `settings`. The transport adds what is its own
/// (the peer's private data, how to reopen).
connection_parts parts_for(const runtime& rt, const connection_settings& settings, std::shared_ptr<queue_pair> data,
                           std::string peer, std::shared_ptr<transport> watcher, bool with_agent);

/// Event listener thread (or before the connection is shared). The connection.
connection assemble(connection_parts parts);

/// Event listener thread. Gives `conn`'s agent its control QP (connected, RTS),
/// with what watches it (rdma_cm's second id; null when the data QP's
/// transport watches both).
void attach_control(const connection& conn, std::shared_ptr<queue_pair> control,
                    std::shared_ptr<transport> watcher = nullptr);

/// Event listener thread (or before the connection is shared). Gives
/// `conn` its rails 1.. (builder::rails; QPs connected, RTS, in rail
/// order): each a connection state of its own ("rail" in the metrics),
/// its large writes and reads striped over them (rail_stripes.hpp).
void attach_rails(const connection& conn, std::vector<std::shared_ptr<queue_pair>> rails,
                  std::size_t stripe_threshold);

/// Event listener thread. The agent's control QP could not be set up: the agent's
/// calls fail with `why`; the data QP stays usable.
void fail_control(const connection& conn, const std::string& why) noexcept;

}  // namespace cordma::detail
