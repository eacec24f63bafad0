// connection_state: a connection's QP and work slots (credits), made and
// ended: construction, teardown, and the connection breaking (fails what
// waits, tells its receive queues). The rest of the class, by concern:
//   connection_posting.cpp      starting operations: credits, posting,
//                               doorbell batching, waiting for a credit
//   connection_completions.cpp  how completions resume operations
//   connection_cancel.cpp       cancelled operations and their receives,
//                               whose messages go to the next recv
//   connection_receive_queue.cpp  handing receives to a receive_queue
#include "engine/connection_state.hpp"

#include <algorithm>

#include "engine/connection_registry.hpp"
#include "engine/event_listener_access.hpp"
#include "engine/rail_stripes.hpp"
#include "engine/receive_queue_state.hpp"
#include "engine/shared_receive_state.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace {
/// The vendor id rdma_rxe reports (RXE_VENDOR_ID).
constexpr std::uint32_t rxe_vendor_id = 0xffffff;
}  // namespace

connection_state::connection_state(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<queue_pair> qp,
                                   std::string peer, const std::shared_ptr<memory_pool>& results_pool,
                                   const char* role)
    : event_listener_(std::move(el)), qp_(std::move(qp)), peer_(std::move(peer)),
      send_slots_(qp_->capacity().max_send_wr), recv_slots_(qp_->capacity().max_recv_wr),
      results_pool_(results_pool), role_(role) {
    event_listener_access::connections(*event_listener_).add(this);
    turn_ms_ = event_listener_access::turn_ms(*event_listener_);
    turn_tick_ = event_listener_access::turn_tick(*event_listener_);
    latency_ = &event_listener_access::connections(*event_listener_).latency(operation_kind::send);
    check_atomic_results_ = qp_->pd()->device()->attributes().vendor_id == rxe_vendor_id;
    bell_.ring = &connection_state::on_ring;
    bell_.self = this;
    // One completion retires at most a quarter of the send queue, so the
    // queue never runs dry waiting for a completion that comes late (a
    // chain of large writes keeps three quarters of them in flight).
    signal_every_ = static_cast<std::uint32_t>(std::clamp<std::size_t>(send_slots_.capacity() / 4, 1, 32));
}

work_slot* connection_state::take_slot(bool receive) noexcept {
    work_slot*& free = receive ? free_recv_ : free_send_;
    if (free != nullptr) {
        work_slot* slot = free;
        free = slot->next_free;
        slot->next_free = nullptr;
        return slot;
    }
    slot_array& slots = receive ? recv_slots_ : send_slots_;
    std::size_t index = slots.made();
    work_slot* slot = slots.make();
    if (slot == nullptr)
        return nullptr;  // every slot is in use
    slot->on_complete = &connection_state::on_complete;
    slot->owner = this;
    slot->receive = receive;
    if (!receive) {
        slot->wr.wr_id = slot->as_wr_id();
        slot->wr.sg_list = slot->sges.data();
        if (atomic_results_ != nullptr) {
            slot->atomic_result = &atomic_results_[index];
            slot->atomic_lkey = atomic_lkey_;
        }
    }
    return slot;
}

bool connection_state::has_free_slot(bool receive) const noexcept {
    return (receive ? free_recv_ : free_send_) != nullptr || !(receive ? recv_slots_ : send_slots_).full();
}

void connection_state::make_atomic_results() {
    // A registration per connection costs a storm of them an ibv_reg_mr and
    // an ibv_dereg_mr each: the builder's pool registers once for many.
    std::uint32_t lkey = 0;
    if (results_pool_) {
        atomic_results_block_ =
            results_pool_->allocate(send_slots_.capacity() * sizeof(std::uint64_t), alignof(std::uint64_t));
        atomic_results_ = reinterpret_cast<std::uint64_t*>(atomic_results_block_.data());
        lkey = lkey_of(atomic_results_block_.all());
    } else {
        own_atomic_results_.resize(send_slots_.capacity());
        atomic_results_mr_ = memory_region::register_memory(qp_->pd(), own_atomic_results_.data(),
                                                            own_atomic_results_.size() * sizeof(std::uint64_t),
                                                            access_flags::local_write);
        atomic_results_ = own_atomic_results_.data();
        lkey = atomic_results_mr_.lkey();
    }
    atomic_lkey_ = lkey;
    // The slots made so far; take_slot gives later ones theirs.
    for (std::size_t i = 0; i < send_slots_.made(); ++i) {
        send_slots_[i].atomic_result = &atomic_results_[i];
        send_slots_[i].atomic_lkey = lkey;
    }
}

connection_state::~connection_state() {
    event_listener_access::connections(*event_listener_).remove(this);
    if (shared_receives_)
        shared_receives_->detach(qp_->qp_num());
    if (agent) {
        // The agent (and its control QP) would otherwise outlive us, kept
        // alive by its own receive loops.
        auto a = std::move(agent);
        if (event_listener_->running_in_this_thread())
            a->shut_down("connection closed");
        else
            event_listener_->post([a] { a->shut_down("connection closed"); });
    }
}

void connection_state::attach_shared_receives(std::shared_ptr<shared_receive_state> srq) {
    srq->attach(qp_->qp_num(), peer_, weak_from_this());
    shared_receives_ = std::move(srq);
}

void connection_state::set_transport(std::shared_ptr<detail::transport> t) {
    transport_ = std::move(t);
    transport_->attach(weak_from_this());
}

void connection_state::mark_broken(const std::string& why, disconnect_cause cause) noexcept {
    broken_ = true;
    broken_reason_ = why;
    if (closing_here)
        cause = disconnect_cause::closed_here;
    try {
        event_listener_access::connections(*event_listener_).note_broken(this, why, cause, rail_ == 0);
    } catch (...) {  // the snapshot shows it up a while longer; the connection still breaks
    }
    detail::logf(log_level::info, "cordma: connection to %s (QP %u) ended: %s", peer_.c_str(), qp_->qp_num(),
                 why.c_str());
    fail_waiters();
    if (stripes_ != nullptr)
        stripes_->shut_down(why);
    if (receive_queue != nullptr)
        receive_queue->on_broken();
    if (shared_receives_ != nullptr)
        shared_receives_->on_broken(qp_->qp_num(), peer_, why);
    if (rail_owner != nullptr)
        rail_owner->rail_broken(*this);
}

void connection_state::fail_waiters() noexcept {
    while (send_waiters_head_ != nullptr || recv_waiters_head_ != nullptr) {
        operation_base* op = send_waiters_head_ ? send_waiters_head_ : recv_waiters_head_;
        unlink(op);
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        op->wake();
    }
}

void connection_state::attach_rails(std::vector<std::shared_ptr<connection_state>> rails, std::size_t threshold) {
    std::uint8_t index = 1;
    for (auto& rail : rails)
        rail->set_rail(index++);
    stripes_ = std::make_unique<rail_stripes>(*this, std::move(rails), threshold);
}

void connection_state::shut_down(const std::string& why, disconnect_cause cause) noexcept {
    if (!broken_)
        mark_broken(why, cause);
    if (agent)
        agent->shut_down(why);
    try {
        qp_->to_error();
    } catch (const std::exception& e) {
        detail::logf(log_level::error, "cordma: shutting down connection to %s: %s", peer_.c_str(), e.what());
    }
}

}  // namespace cordma::detail
