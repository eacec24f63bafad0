#pragma once
/// What connections made from one builder (or one listener) share: the
/// device, the event listener, a protection domain, a memory pool and the
/// completion queues, pooled (cq_pool.hpp) so they grow as connections are
/// added, past what one CQ of the device holds.

#include <atomic>
#include <memory>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/completion_queue.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/metrics_endpoint.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/queue_pair.hpp>
#include "connect/cq_pool.hpp"
#include "engine/registration_cache.hpp"

namespace cordma::detail {

class shared_receive_state;

struct runtime : std::enable_shared_from_this<runtime> {
    std::shared_ptr<cordma::event_listener> event_listener;
    std::shared_ptr<protection_domain> pd;
    std::shared_ptr<memory_pool> pool;
    /// Registered for local writes only: every connection's atomic result
    /// slots, so a connection costs no registration of its own (and no
    /// peer's key ever reaches them).
    std::shared_ptr<memory_pool> results_pool;
    /// Registrations of callers' own buffers kept for reuse
    /// (builder::local_registration).
    std::unique_ptr<registration_cache> registrations;
    /// The shared CQs, and the work requests the live QPs on them may
    /// have outstanding (event listener thread).
    std::unique_ptr<cq_pool> send_cqs;
    std::unique_ptr<cq_pool> recv_cqs;
    /// The TCP endpoint exchange's io_context thread (connect/tcp/),
    /// started by the first TCP connect or listen; stopped and joined when
    /// the runtime goes.
    std::shared_ptr<class tcp_service> tcp;
    /// What each peer host holds from the agents of these connections
    /// (agent_limits::max_peer_total_bytes, max_peer_regions).
    std::shared_ptr<class agent_ledger> ledger;
    /// connection_settings::metrics_endpoint's, shared with the other
    /// builders naming its address.
    std::shared_ptr<metrics_endpoint> metrics;
    /// Rails 1.. (builder::rails): another device each, with its own PD
    /// and CQs, on the same event listener; `pool` and `results_pool`
    /// register their memory on each rail's PD too. Empty: one rail.
    struct rail {
        std::shared_ptr<device_context> device;
        std::shared_ptr<protection_domain> pd;
        std::unique_ptr<cq_pool> send_cqs;
        std::unique_ptr<cq_pool> recv_cqs;
    };
    std::vector<rail> rails;
    /// Rails in all (1 without builder::rails).
    std::size_t rail_count() const noexcept { return 1 + rails.size(); }

    /// Event listener thread. An RC QP on the shared PD and on CQs with room
    /// for it (a CQ that can overflow loses completions); the room is given
    /// back when the QP is destroyed. With `srq`, the QP receives through
    /// that shared receive queue, on the CQ where the SRQ's receives have
    /// their room (it has no receive queue of its own, and keeps the SRQ
    /// alive).
    std::shared_ptr<queue_pair> create_qp(const qp_capacity& capacity,
                                          std::shared_ptr<shared_receive_state> srq = nullptr);
    /// Event listener thread. An RC QP on rail `index` (1..rails.size()):
    /// that device's PD and CQs, `capacity`'s send queue and no receive
    /// queue (rails 1.. carry only writes and reads).
    std::shared_ptr<queue_pair> create_rail_qp(std::size_t index, const qp_capacity& capacity);
    /// The device of rail `index` (0: the event listener's).
    const std::shared_ptr<device_context>& rail_device(std::size_t index) const noexcept;

    /// Event listener thread. A receive CQ with room for `entries` more
    /// receives (an SRQ's), and giving it back (any thread).
    std::shared_ptr<completion_queue> reserve_receives(std::uint32_t entries);
    void release_receives(const completion_queue* cq, std::uint32_t entries) noexcept;

    /// Throws (naming builder::shared_receives and `when`) unless `srq` is
    /// alive and on this runtime's protection domain.
    void check_shared_receives(const shared_receive_state& srq, const char* when) const;

private:
    /// Room taken on a send and a receive CQ, given back when a QP goes.
    struct cq_room {
        std::size_t rail = 0;
        const completion_queue* send_cq = nullptr;
        int send_entries = 0;
        const completion_queue* recv_cq = nullptr;
        int recv_entries = 0;
    };
    void release(const cq_room& room) noexcept;
    /// release(), on the event listener thread (posted there from others).
    void release_from_any_thread(const cq_room& room) noexcept;
};

/// The device, event listener, PD, pool and CQs `settings` ask for.
std::shared_ptr<runtime> make_runtime(const connection_settings& settings);

}  // namespace cordma::detail
