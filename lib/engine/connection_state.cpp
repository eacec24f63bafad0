// connection_state: a connection's QP, work slots (credits), the
// operations waiting for a credit, and how completions resume them.
#include "engine/connection_state.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <stdexcept>


namespace cordma::detail {

connection_state::connection_state(std::shared_ptr<cordma::event_listener> listener, std::shared_ptr<queue_pair> qp,
                                   std::string peer)
    : event_listener_(std::move(listener)), qp_(std::move(qp)), peer_(std::move(peer)),
      send_slots_(qp_->capacity().max_send_wr), recv_slots_(qp_->capacity().max_recv_wr),
      atomic_results_(send_slots_.size()) {
    atomic_results_mr_ = memory_region::register_memory(qp_->pd(), atomic_results_.data(),
                                                        atomic_results_.size() * sizeof(std::uint64_t),
                                                        access_flags::local_write);
    auto init = [this](std::vector<work_slot>& slots, bool receive) {
        work_slot* head = nullptr;
        for (std::size_t i = slots.size(); i-- > 0;) {
            work_slot& slot = slots[i];
            slot.on_complete = &connection_state::on_complete;
            slot.owner = this;
            slot.receive = receive;
            slot.next_free = head;
            if (!receive) {
                slot.atomic_result = &atomic_results_[i];
                slot.atomic_lkey = atomic_results_mr_.lkey();
            }
            head = &slot;
        }
        return head;
    };
    free_send_ = init(send_slots_, false);
    free_recv_ = init(recv_slots_, true);
}

connection_state::~connection_state() {
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

bool connection_state::start(operation_base* op) noexcept {
    if (broken_) {
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        return false;
    }
    bool receive = is_receive(op->kind);
    work_slot*& free = receive ? free_recv_ : free_send_;
    if (free == nullptr) {
        enqueue(op);
        return true;
    }
    work_slot* slot = free;
    free = slot->next_free;
    try {
        post(op, slot);
    } catch (...) {
        slot->op = nullptr;
        slot->next_free = free;
        free = slot;
        fail(op, std::current_exception());
        return false;
    }
    if (outstanding_++ == 0)
        self_while_busy_ = shared_from_this();
    return true;
}

void connection_state::post(operation_base* op, work_slot* slot) {
    ibv_sge sges[max_sges];
    for (std::size_t i = 0; i < op->sge_count; ++i) {
        const local_slice& s = op->local[i];
        sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()), s.lkey()};
    }
    if (op->kind == op_kind::recv) {
        ibv_recv_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        qp_->post_recv(wr);
    } else {
        ibv_send_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = op->remote.address;
        wr.wr.rdma.rkey = op->remote.rkey;
        switch (op->kind) {
        case op_kind::send: wr.opcode = IBV_WR_SEND; break;
        case op_kind::send_with_imm:
            wr.opcode = IBV_WR_SEND_WITH_IMM;
            wr.imm_data = htonl(op->imm);
            break;
        case op_kind::write: wr.opcode = IBV_WR_RDMA_WRITE; break;
        case op_kind::write_with_imm:
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(op->imm);
            break;
        case op_kind::read: wr.opcode = IBV_WR_RDMA_READ; break;
        case op_kind::fetch_add:
        case op_kind::compare_swap:
            wr.opcode = op->kind == op_kind::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic.remote_addr = op->remote.address;
            wr.wr.atomic.rkey = op->remote.rkey;
            wr.wr.atomic.compare_add = op->compare_add;
            wr.wr.atomic.swap = op->swap;
            sges[0] = {reinterpret_cast<std::uint64_t>(slot->atomic_result), 8, slot->atomic_lkey};
            wr.num_sge = 1;
            break;
        case op_kind::recv: break;
        }
        // Small payloads ride inside the work request: no DMA read of the
        // buffer, lower latency. Only for sends and writes.
        if ((op->kind == op_kind::send || op->kind == op_kind::send_with_imm || op->kind == op_kind::write ||
             op->kind == op_kind::write_with_imm) &&
            op->sge_count == 1 && sges[0].length <= qp_->capacity().max_inline_data)
            wr.send_flags |= IBV_SEND_INLINE;
        qp_->post_send(wr);
    }
    // Posted: from here the slot, not the frame, holds the buffers.
    for (std::size_t i = 0; i < op->sge_count; ++i)
        slot->keep_alive[i] = std::move(const_cast<std::shared_ptr<mr_block>&>(op->local[i].block()));
    slot->op = op;
    slot->ticket = op->ticket;
    op->slot = slot;
}

void connection_state::on_complete(completion_target* target, const ibv_wc& wc) noexcept {
    auto* slot = static_cast<work_slot*>(target);
    slot->owner->complete(slot, wc);
}

void connection_state::complete(work_slot* slot, const ibv_wc& wc) noexcept {
    operation_base* op = slot->op;
    for (auto& block : slot->keep_alive)
        block.reset();
    if (op != nullptr) {
        op->slot = nullptr;
        op->done = true;
        op->status = wc.status;
        op->vendor_error = wc.vendor_err;
        if (wc.status == IBV_WC_SUCCESS) {
            op->byte_len = wc.byte_len;
            // A bit test: real NICs set other flags beside WITH_IMM.
            op->has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
            op->received_imm = op->has_imm ? ntohl(wc.imm_data) : 0;
            if (op->kind == op_kind::fetch_add || op->kind == op_kind::compare_swap)
                op->old_value = *slot->atomic_result;
        }
    }
    if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR && !broken_)
        mark_broken(std::string("an earlier ") + (op ? to_string(op->kind) : "abandoned operation") +
                    " failed with " + ibv_wc_status_str(wc.status) + " (status " +
                    std::to_string(static_cast<int>(wc.status)) + ")");
    slot->op = nullptr;
    work_slot*& free = slot->receive ? free_recv_ : free_send_;
    slot->next_free = free;
    free = slot;
    // Keep ourselves alive through the resumptions below, which may drop
    // the last handle to this connection.
    std::shared_ptr<connection_state> keep = --outstanding_ == 0 ? std::move(self_while_busy_) : nullptr;
    promote_waiters(slot->receive);
    if (op != nullptr)
        op->continuation.resume();
}

void connection_state::promote_waiters(bool receive) noexcept {
    for (;;) {
        operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
        work_slot* free = receive ? free_recv_ : free_send_;
        if (head == nullptr || free == nullptr)
            return;
        operation_base* op = head;
        unlink(op);
        if (!start(op))
            op->continuation.resume();
    }
}

void connection_state::enqueue(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
    operation_base*& tail = receive ? recv_waiters_tail_ : send_waiters_tail_;
    op->waiting = true;
    op->next_waiting = nullptr;
    op->prev_waiting = tail;
    (tail ? tail->next_waiting : head) = op;
    tail = op;
}

void connection_state::unlink(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
    operation_base*& tail = receive ? recv_waiters_tail_ : send_waiters_tail_;
    (op->prev_waiting ? op->prev_waiting->next_waiting : head) = op->next_waiting;
    (op->next_waiting ? op->next_waiting->prev_waiting : tail) = op->prev_waiting;
    op->next_waiting = op->prev_waiting = nullptr;
    op->waiting = false;
}

void connection_state::fail(operation_base* op, std::exception_ptr error) noexcept {
    op->error = std::move(error);
    op->done = true;
}

void connection_state::abandon(operation_base* op) noexcept {
    if (op->waiting)
        unlink(op);
    else if (op->slot != nullptr && op->slot->op == op)
        op->slot->op = nullptr;  // orphaned: the completion just frees the slot
    op->slot = nullptr;
}

void connection_state::cancel(operation_base* op, std::uint64_t ticket) noexcept {
    // `op` may be long gone: find it among the live ones before touching it.
    for (operation_base* head : {send_waiters_head_, recv_waiters_head_})
        for (operation_base* w = head; w != nullptr; w = w->next_waiting)
            if (w == op && w->ticket == ticket) {
                unlink(op);
                fail(op, std::make_exception_ptr(operation_cancelled(to_string(op->kind), peer_)));
                op->continuation.resume();
                return;
            }
    for (auto* slots : {&send_slots_, &recv_slots_})
        for (work_slot& slot : *slots)
            if (slot.op == op && slot.ticket == ticket) {
                slot.op = nullptr;  // the completion will only free the slot
                op->slot = nullptr;
                fail(op, std::make_exception_ptr(operation_cancelled(to_string(op->kind), peer_)));
                op->continuation.resume();
                return;
            }
}

void connection_state::mark_broken(const std::string& why) noexcept {
    broken_ = true;
    broken_reason_ = why;
    fail_waiters();
}

void connection_state::fail_waiters() noexcept {
    while (send_waiters_head_ != nullptr || recv_waiters_head_ != nullptr) {
        operation_base* op = send_waiters_head_ ? send_waiters_head_ : recv_waiters_head_;
        unlink(op);
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        op->continuation.resume();
    }
}

void connection_state::set_transport(std::shared_ptr<detail::transport> t) {
    transport_ = std::move(t);
    transport_->attach(weak_from_this());
}

void connection_state::shut_down(const std::string& why) noexcept {
    if (!broken_)
        mark_broken(why);
    if (agent)
        agent->shut_down(why);
    try {
        qp_->to_error();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma: shutting down connection to %s: %s\n", peer_.c_str(), e.what());
    }
}

}  // namespace cordma::detail
