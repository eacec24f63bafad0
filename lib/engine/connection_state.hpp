#pragma once
/// What a connection is underneath: its QP, its work slots (credits), the
/// operations waiting for a credit, and whether it still works. Touched only
/// on the event listener thread.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/task.hpp>
#include <cordma/detail/operation.hpp>
#include "engine/transport.hpp"

namespace cordma::detail {

/// What runs beside a connection on its own control QP: the memory-region
/// agent (lib/agent/), which the engine knows only through this, to tell it
/// when the connection goes.
class connection_companion {
public:
    virtual ~connection_companion() = default;
    /// Event listener thread. The connection is gone: fail what waits.
    virtual void shut_down(const std::string& why) noexcept = 0;
};

class connection_state : public std::enable_shared_from_this<connection_state> {
public:
    connection_state(std::shared_ptr<cordma::event_listener> listener, std::shared_ptr<queue_pair> qp,
                     std::string peer);
    ~connection_state();
    connection_state(const connection_state&) = delete;
    connection_state& operator=(const connection_state&) = delete;

    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }
    const std::shared_ptr<queue_pair>& qp() const noexcept { return qp_; }
    const std::string& peer() const noexcept { return peer_; }
    bool broken() const noexcept { return broken_; }

    /// Event listener thread. Posts `op`, or queues it for a credit. Returns false
    /// if it finished at once (failed before posting): the caller resumes it.
    bool start(operation_base* op) noexcept;

    /// Event listener thread. Forgets `op` (its coroutine is going away): a queued op
    /// is dropped, an in-flight one orphaned. Its buffers stay alive in its
    /// slot until the completion arrives.
    void abandon(operation_base* op) noexcept;

    /// Event listener thread. Cancels `op` if it is still the operation started
    /// with `ticket`: it completes with operation_cancelled.
    void cancel(operation_base* op, std::uint64_t ticket) noexcept;

    /// Event listener thread. Moves the QP to ERROR so every pending operation
    /// completes (with a flush error) and new ones fail with `why`.
    void shut_down(const std::string& why) noexcept;

    /// What set the connection up and watches the peer (rdma_cm id, TCP
    /// socket); kept as long as the state. Event listener thread.
    void set_transport(std::shared_ptr<detail::transport> t);
    const std::shared_ptr<detail::transport>& transport() const noexcept { return transport_; }

    /// The memory-region agent, if the connection has a control channel.
    std::shared_ptr<connection_companion> agent;

    /// How to open another QP to the same peer (set by the connecting side).
    std::function<task<connection>()> reopen;

    /// What the peer sent in its private data while connecting (plain
    /// connections only; connection::peer_private_data).
    std::vector<std::byte> peer_private_data;

    /// Number of work requests posted and not yet completed.
    std::size_t outstanding() const noexcept { return outstanding_; }

private:
    static void on_complete(completion_target* target, const ibv_wc& wc) noexcept;
    void complete(work_slot* slot, const ibv_wc& wc) noexcept;
    void post(operation_base* op, work_slot* slot);
    void enqueue(operation_base* op) noexcept;
    void unlink(operation_base* op) noexcept;
    void promote_waiters(bool receive) noexcept;
    void fail(operation_base* op, std::exception_ptr error) noexcept;
    void fail_waiters() noexcept;
    void mark_broken(const std::string& why) noexcept;

    std::shared_ptr<cordma::event_listener> event_listener_;
    std::shared_ptr<queue_pair> qp_;
    std::shared_ptr<detail::transport> transport_;
    std::string peer_;

    std::vector<work_slot> send_slots_;
    std::vector<work_slot> recv_slots_;
    work_slot* free_send_ = nullptr;
    work_slot* free_recv_ = nullptr;
    std::vector<std::uint64_t> atomic_results_;
    memory_region atomic_results_mr_;

    // Waiting for a credit, FIFO, per queue.
    operation_base* send_waiters_head_ = nullptr;
    operation_base* send_waiters_tail_ = nullptr;
    operation_base* recv_waiters_head_ = nullptr;
    operation_base* recv_waiters_tail_ = nullptr;

    bool broken_ = false;
    std::string broken_reason_;
    std::uint64_t next_ticket_ = 1;
    std::size_t outstanding_ = 0;
    // While work requests are in flight the state keeps itself alive, so a
    // completion never finds its slot freed (even if every handle is gone).
    std::shared_ptr<connection_state> self_while_busy_;
};

/// How the library reaches inside the public handle.
struct connection_access {
    static const std::shared_ptr<connection_state>& state(const connection& c) noexcept { return c.state_; }
    static connection make(std::shared_ptr<connection_state> state) { return connection(std::move(state)); }
};

}  // namespace cordma::detail
