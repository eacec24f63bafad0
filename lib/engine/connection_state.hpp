#pragma once
/// What a connection is underneath: its QP, its work slots (credits), the
/// operations waiting for a credit, the receives still posted in posting
/// order (with those whose operation was cancelled), the messages that
/// arrived for nobody, and whether it still works. Touched only on the event
/// listener thread.

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/task.hpp>
#include <cordma/detail/operation.hpp>
#include "engine/connection_tally.hpp"
#include "engine/latency_recorder.hpp"
#include "engine/transport.hpp"
#include "engine/slot_array.hpp"
#include "engine/work_slot.hpp"

namespace cordma::detail {

/// What runs beside a connection on its own control QP: the memory-region
/// agent (lib/agent/), which the engine knows only through this, to tell it
/// when the connection goes.
class shared_receive_state;

class connection_companion {
public:
    virtual ~connection_companion() = default;
    /// Event listener thread. The connection is gone: fail what waits.
    virtual void shut_down(const std::string& why) noexcept = 0;
};

class rail_stripes;

class connection_state : public std::enable_shared_from_this<connection_state> {
public:
    /// `results_pool`: registered memory (local writes only) for the atomic
    /// result slots, one registration shared by many connections; null (an
    /// adopted QP): the connection registers its own. `role` names the
    /// QP in metrics ("data", or "agent" for the agent's control QP; a
    /// string literal).
    connection_state(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<queue_pair> qp,
                     std::string peer, const std::shared_ptr<memory_pool>& results_pool = nullptr,
                     const char* role = "data");
    ~connection_state();
    connection_state(const connection_state&) = delete;
    connection_state& operator=(const connection_state&) = delete;

    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }
    const std::shared_ptr<queue_pair>& qp() const noexcept { return qp_; }
    const std::string& peer() const noexcept { return peer_; }
    bool broken() const noexcept { return broken_; }
    /// Where its atomic result slots came from (null: registered alone); a
    /// companion QP of the same connection (the agent's) takes its own there.
    const std::shared_ptr<memory_pool>& results_pool() const noexcept { return results_pool_; }

    /// Event listener thread. Posts `op`, or queues it for a credit. Returns false
    /// if it finished at once (failed before posting): the caller resumes it.
    bool start(operation_base* op) noexcept;

    /// Event listener thread. Forgets `op` (its coroutine is going away): a queued op
    /// is dropped, an in-flight one orphaned. Its buffers stay alive in its
    /// slot until the completion arrives.
    void abandon(operation_base* op) noexcept;

    /// Event listener thread. Cancels `op` if it is still the operation started
    /// with `ticket`: it completes with operation_cancelled. A receive that
    /// was already posted stays posted, as an orphan: the message that lands
    /// in it goes to the next recv (see start()).
    void cancel(operation_base* op, std::uint64_t ticket) noexcept;

    // ---- For a receive_queue (lib/engine/receive_queue_state.cpp) -------
    // A queue owns the receive slots it takes; their completions go to it
    // (work_slot::queue) instead of to an operation.

    /// Event listener thread. Why a receive_queue cannot take this
    /// connection's receives now (another queue has them, or recv operations
    /// are posted or waiting), or empty if it can.
    std::string receive_queue_refusal() const;
    /// Event listener thread. Gives `queue` the messages kept for the next
    /// recv (in arrival order) and the posted orphans (in posting order), so
    /// none is lost when a queue takes over from plain recv.
    void hand_orphans_to(receive_queue_state* queue, std::vector<work_slot*>& kept,
                         std::vector<work_slot*>& posted);
    /// Event listener thread. Free receive slots (credits).
    std::size_t free_recv_slots() const noexcept;
    /// Event listener thread. A free receive slot, or nullptr.
    work_slot* take_recv_slot() noexcept;
    /// Event listener thread. Posts a receive into slot->buffers; throws
    /// verbs_error if the QP refuses it.
    void post_receive(work_slot* slot);
    /// Event listener thread. Gives a slot (not posted) back: its buffers go,
    /// and an operation waiting for a receive credit may take it.
    void release_recv_slot(work_slot* slot) noexcept;
    /// Event listener thread. The queue goes away: its posted receives become
    /// orphans (their messages go to the next recv) and `kept` (its messages
    /// nobody took, in arrival order) are kept for the next recv.
    void take_back_from(receive_queue_state* queue, std::span<work_slot* const> kept) noexcept;
    /// The receive_queue that owns the receives, if any (set and cleared by
    /// the queue, which outlives its attachment).
    receive_queue_state* receive_queue = nullptr;
    /// connection::close has begun: an end seen meanwhile (the peer's
    /// disconnect answering ours) counts as closed here.
    bool closing_here = false;
    const std::string& broken_reason() const noexcept { return broken_reason_; }

    /// Event listener thread. Moves the QP to ERROR so every pending operation
    /// completes (with a flush error) and new ones fail with `why`;
    /// counted in the metrics as `cause` (if it had not broken already).
    void shut_down(const std::string& why, disconnect_cause cause = disconnect_cause::other) noexcept;

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

    /// Event listener thread (or before the state is shared). The data QP
    /// receives through `srq` (builder::shared_receives): recv and
    /// receive_queue are refused, and the queue hears when this breaks.
    void attach_shared_receives(std::shared_ptr<shared_receive_state> srq);

    /// Number of work requests posted and not yet completed.
    std::size_t outstanding() const noexcept { return outstanding_; }
    /// Event listener thread. Sends, writes, reads or atomics posted and not
    /// yet completed, or waiting for a credit.
    bool sends_pending() const noexcept { return sent_head_ != nullptr || chain_head_ != nullptr || send_waiters_head_ != nullptr; }

    /// The public handles (cordma::connection) referring to this state;
    /// when the last goes, the connection closes (connection_handle.cpp).
    std::atomic<std::uint32_t> handles{0};
    /// Event listener thread. Set once the close of a dropped connection
    /// has begun, so a handle made and dropped again starts no second one.
    bool closing_dropped = false;

    /// What it counted (metrics.hpp), live; read() from any thread.
    /// Appends its pending operations (stuck_report.hpp), aged against
    /// `now_ms` (the loop's turn time). Loop thread.
    void collect_pending(std::uint64_t now_ms, std::vector<pending_operation>& out) const;
    const connection_tally& tally() const noexcept { return tally_; }
    /// "data" or "agent" (metrics).
    const char* role() const noexcept { return role_; }
    /// Loop thread. Its receives are a standing loop's (the agent's control
    /// QP: it receives only through its own receive loop, and its calls
    /// have stuck entries of their own), not operations anyone awaits one
    /// by one: the stuck report leaves them out, as it does a
    /// receive_queue's.
    void receives_are_standing() noexcept { standing_receives_ = true; }

    // ---- Rails (builder::rails; lib/engine/rail_stripes.hpp) -------------

    /// Before the state is shared. This state is rail `index` (1..) of a
    /// connection: its QP is on that rail's device, and the memory it
    /// names is keyed for that rail.
    void set_rail(std::uint8_t index) noexcept { rail_ = index; }
    std::uint8_t rail() const noexcept { return rail_; }
    /// Event listener thread (or before the state is shared). Rails 1..
    /// of this connection (this state is rail 0): its writes and reads of
    /// at least `threshold` bytes are striped over all of them, and when
    /// this one breaks they are shut down too.
    void attach_rails(std::vector<std::shared_ptr<connection_state>> rails, std::size_t threshold);
    /// The rails and their stripes, or null (one rail).
    const rail_stripes* stripes() const noexcept { return stripes_.get(); }
    rail_stripes* stripes() noexcept { return stripes_.get(); }
    /// This state is a rail 1.. of that connection's stripes, which hear
    /// when it breaks (set and cleared by rail_stripes).
    rail_stripes* rail_owner = nullptr;

private:
    static void on_complete(completion_target* target, const ibv_wc& wc) noexcept;
    static void on_ring(doorbell* bell) noexcept;
    void ring() noexcept;
    void fail_unposted(work_slot* first, std::exception_ptr error) noexcept;
    void complete_send(work_slot* slot, const ibv_wc& wc) noexcept;
    void complete(work_slot* slot, const ibv_wc& wc) noexcept;
    void take_buffers(work_slot* slot, operation_base* op) noexcept;
    void complete_queue_slot(work_slot* slot, const ibv_wc& wc) noexcept;
    void post(operation_base* op, work_slot* slot);
    void count_posted() noexcept;
    void append_posted(work_slot* slot) noexcept;
    void append_sent(work_slot* slot) noexcept;
    work_slot* pop_sent() noexcept;
    void remove_posted(work_slot* slot) noexcept;
    void adopt_orphan(operation_base* op) noexcept;
    void orphan(work_slot* slot) noexcept;
    void take_kept(operation_base* op) noexcept;
    /// The message in `slot` (a cancelled recv's buffer) becomes `op`'s
    /// (connection_cancel.cpp).
    void hand_over(const work_slot& slot, std::uint32_t byte_len, operation_base* op) const;
    void note_failure(const char* what, const ibv_wc& wc) noexcept;
    /// The error of an operation flushed by the QP's error state, naming
    /// the failure that broke the connection.
    std::exception_ptr flushed_error(const operation_base* op, const ibv_wc& wc) noexcept;
    /// The error of an atomic rxe completed without its result.
    std::exception_ptr atomic_result_lost(const operation_base* op) noexcept;
    /// Event listener thread, at the first atomic posted: every send
    /// slot's result word, registered for local writes. Throws (that atomic
    /// fails) if the memory cannot be had.
    void make_atomic_results();
    /// A free slot of the send or receive queue: one given back, else one
    /// made now; nullptr when every slot is in use.
    work_slot* take_slot(bool receive) noexcept;
    bool has_free_slot(bool receive) const noexcept;
    void enqueue(operation_base* op) noexcept;
    void unlink(operation_base* op) noexcept;
    void promote_waiters(bool receive) noexcept;
    void fail(operation_base* op, std::exception_ptr error) noexcept;
    void fail_waiters() noexcept;
    void mark_broken(const std::string& why, disconnect_cause cause) noexcept;

    std::shared_ptr<cordma::event_listener> event_listener_;
    // The loop's turn time (event_listener_access::turn_ms): stamped on
    // each posted slot and each waiting operation.
    const std::uint64_t* turn_ms_ = nullptr;
    // The loop's turn ticks (event_listener_access::turn_tick) and the
    // listener's latency histogram per kind (connection_registry::latency):
    // a posted slot is stamped, its completion recorded.
    const std::uint64_t* turn_tick_ = nullptr;
    latency_recorder* latency_ = nullptr;
    std::shared_ptr<queue_pair> qp_;
    std::shared_ptr<detail::transport> transport_;
    std::string peer_;

    // Made on first use (slot_array.hpp); the free lists hold the slots
    // made and given back.
    slot_array send_slots_;
    slot_array recv_slots_;
    work_slot* free_send_ = nullptr;
    work_slot* free_recv_ = nullptr;
    // One atomic result slot per send slot: in atomic_results_block_ (from
    // the builder's pool) or own_atomic_results_ (registered alone), made
    // by the first atomic posted (make_atomic_results), so a connection
    // that never does one pins nothing for them (an rpc server's clients).
    std::uint64_t* atomic_results_ = nullptr;
    std::uint32_t atomic_lkey_ = 0;
    std::shared_ptr<memory_pool> results_pool_;
    local_mr atomic_results_block_;
    std::vector<std::uint64_t> own_atomic_results_;
    /// What an atomic's result slot holds until the device writes the old value.
    static constexpr std::uint64_t atomic_poison = 0xa70a1c5e'5105e0f1;
    // rxe (Soft-RoCE) can complete an atomic successfully without writing
    // its result when packets are lost and writes share the QP (see
    // atomic_result_lost in connection_completions.cpp): on rxe each result slot
    // is poisoned before the atomic is posted and checked at completion.
    bool check_atomic_results_ = false;
    // Send requests posted during a drain pass, chained through wr.next,
    // waiting for the pass to end (event_listener_access::ring_after_drain).
    struct chain_bell : doorbell {
        connection_state* self = nullptr;
    } bell_;
    work_slot* chain_head_ = nullptr;
    work_slot* chain_tail_ = nullptr;
    std::uint32_t unsignalled_ = 0;   // in a row, in the chain being built
    std::uint32_t signal_every_ = 1;  // the most requests one completion retires
    // Send slots posted and not completed, in posting order: a completion
    // retires every request before it (selective signalling).
    work_slot* sent_head_ = nullptr;
    work_slot* sent_tail_ = nullptr;
    connection_tally tally_;
    const char* role_;
    bool standing_receives_ = false;
    memory_region atomic_results_mr_;

    // Waiting for a credit, FIFO, per queue.
    operation_base* send_waiters_head_ = nullptr;
    operation_base* send_waiters_tail_ = nullptr;
    operation_base* recv_waiters_head_ = nullptr;
    operation_base* recv_waiters_tail_ = nullptr;

    // Receive slots posted and not completed, in posting order (RC receives
    // complete in that order). Orphans among them (op == nullptr, no queue)
    // are counted: a new recv adopts the oldest instead of posting.
    work_slot* posted_head_ = nullptr;
    work_slot* posted_tail_ = nullptr;
    std::size_t unadopted_orphans_ = 0;
    // Orphans that completed with a message: kept, in arrival order, for the
    // next recv.
    work_slot* kept_head_ = nullptr;
    work_slot* kept_tail_ = nullptr;

    std::shared_ptr<shared_receive_state> shared_receives_;
    // Which rail this state is (0: the connection's own), and rails 1..
    // when it is rail 0 of a connection with several.
    std::uint8_t rail_ = 0;
    std::unique_ptr<rail_stripes> stripes_;
    /// The local key of `s` on this state's rail.
    std::uint32_t lkey_of(const local_slice& s) const noexcept {
        return rail_ == 0 ? s.lkey() : s.block()->rail_lkeys[rail_ - 1];
    }
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
