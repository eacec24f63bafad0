#pragma once
/// What connections made from one builder (or one listener) share: the
/// device, the event listener, a protection domain, a memory pool and a pair
/// of completion queues that grows as connections are added.

#include <atomic>
#include <memory>

#include <cordma/builder.hpp>
#include <cordma/completion_queue.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/queue_pair.hpp>

namespace cordma::detail {

class shared_receive_state;

struct runtime : std::enable_shared_from_this<runtime> {
    std::shared_ptr<cordma::event_listener> event_listener;
    std::shared_ptr<protection_domain> pd;
    std::shared_ptr<memory_pool> pool;
    std::shared_ptr<completion_queue> send_cq;
    std::shared_ptr<completion_queue> recv_cq;
    // Work requests all live QPs on the shared CQs may have outstanding.
    int send_entries_in_use = 0;
    int recv_entries_in_use = 0;
    /// The TCP endpoint exchange's io_context thread (connect/tcp/),
    /// started by the first TCP connect or listen; stopped and joined when
    /// the runtime goes.
    std::shared_ptr<class tcp_service> tcp;
    /// What each peer host holds from the agents of these connections
    /// (agent_limits::max_peer_total_bytes, max_peer_regions).
    std::shared_ptr<class agent_ledger> ledger;

    /// Event listener thread. An RC QP on the shared PD and CQs, which grow first
    /// to make room for it (a CQ that can overflow loses completions); the
    /// room is given back when the QP is destroyed.
    /// With `srq`, the QP receives through that shared receive queue (it
    /// has no receive queue of its own, and keeps the SRQ alive).
    std::shared_ptr<queue_pair> create_qp(const qp_capacity& capacity,
                                          std::shared_ptr<shared_receive_state> srq = nullptr);

    /// Event listener thread. Room on the receive CQ for `entries` more
    /// receives (an SRQ's), and giving it back (any thread).
    void reserve_receives(std::uint32_t entries);
    void release_receives(std::uint32_t entries) noexcept;

    /// Throws (naming builder::shared_receives and `when`) unless `srq` is
    /// alive and on this runtime's protection domain.
    void check_shared_receives(const shared_receive_state& srq, const char* when) const;

private:
    void reserve(const qp_capacity& capacity);
    void release(const qp_capacity& capacity) noexcept;
    /// release(), on the event listener thread (posted there from others).
    void release_from_any_thread(const qp_capacity& capacity) noexcept;
};

/// The device, event listener, PD, pool and CQs `settings` ask for.
std::shared_ptr<runtime> make_runtime(const connection_settings& settings);

}  // namespace cordma::detail
