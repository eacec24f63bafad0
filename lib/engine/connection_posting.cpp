// connection_state, starting operations: an operation takes a work slot
// (a credit) and is posted, chained with others in a drain pass and rung
// once (one doorbell) when the pass ends, or waits, FIFO, for a credit.
#include "engine/connection_state.hpp"

#include <arpa/inet.h>

#include <stdexcept>

#include "engine/event_listener_access.hpp"
#include "engine/rail_stripes.hpp"

namespace cordma::detail {

bool connection_state::start(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    if (receive) {
        if (shared_receives_ != nullptr) [[unlikely]] {
            fail(op, std::make_exception_ptr(std::logic_error(
                         std::string("connection::") + to_string(op->kind) + " to " + peer_ +
                         ": this connection receives through a shared_receive_queue (builder::shared_receives), "
                         "which takes every incoming message; await shared_receive_queue::next() instead")));
            return false;
        }
        if (receive_queue != nullptr) [[unlikely]] {
            fail(op, std::make_exception_ptr(std::logic_error(
                         std::string("connection::") + to_string(op->kind) + " to " + peer_ +
                         ": a receive_queue owns this connection's receives (its posted receives take every "
                         "incoming message); await receive_queue::next() instead, or destroy the queue first")));
            return false;
        }
        // A message that arrived in a cancelled recv's buffer comes first,
        // even once the connection is broken: it arrived before.
        if (kept_head_ != nullptr) [[unlikely]] {
            take_kept(op);
            return false;
        }
    }
    if (broken_) {
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        return false;
    }
    if (stripes_ != nullptr) [[unlikely]] {
        switch (stripes_->start(op)) {
        case rail_stripes::outcome::started: return true;
        case rail_stripes::outcome::finished: return false;
        case rail_stripes::outcome::not_striped: break;
        }
    }
    if (receive && unadopted_orphans_ > 0) [[unlikely]] {
        // A cancelled recv's receive is still posted: take its place instead
        // of posting behind it, or the next message would land there and
        // every later one would be one receive late.
        adopt_orphan(op);
        return true;
    }
    work_slot* slot = take_slot(receive);
    if (slot == nullptr) {
        enqueue(op);
        return true;
    }
    try {
        post(op, slot);
    } catch (...) {
        for (auto& b : slot->buffers)
            b = local_slice{};
        slot->op = nullptr;
        work_slot*& free = receive ? free_recv_ : free_send_;
        slot->next_free = free;
        free = slot;
        fail(op, std::current_exception());
        return false;
    }
    count_posted();
    return true;
}

void connection_state::count_posted() noexcept {
    if (outstanding_++ == 0)
        self_while_busy_ = shared_from_this();
}

void connection_state::post(operation_base* op, work_slot* slot) {
    if (op->kind == op_kind::recv) {
        ibv_sge sges[max_sges];
        for (std::size_t i = 0; i < op->sge_count; ++i) {
            const local_slice& s = op->local[i];
            sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()), lkey_of(s)};
        }
        ibv_recv_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        qp_->post_recv(wr);
        slot->posted_ms = *turn_ms_;
        append_posted(slot);
        tally_[op_kind::recv].posted.add();
    } else {
        // Only the fields this opcode reads: wr_id and sg_list were set when
        // the slot was made, and the rest of the request is never read.
        ibv_send_wr& wr = slot->wr;
        std::uint64_t bytes = 0;
        for (std::size_t i = 0; i < op->sge_count; ++i) {
            const local_slice& s = op->local[i];
            slot->sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()),
                             lkey_of(s)};
            bytes += s.size();
        }
        wr.next = nullptr;
        wr.num_sge = op->sge_count;
        unsigned flags = 0;
        bool may_inline = false;
        switch (op->kind) {
        case op_kind::send:
            wr.opcode = IBV_WR_SEND;
            may_inline = true;
            break;
        case op_kind::send_with_imm:
            wr.opcode = IBV_WR_SEND_WITH_IMM;
            wr.imm_data = htonl(op->imm);
            may_inline = true;
            break;
        case op_kind::write:
        case op_kind::write_with_imm:
        case op_kind::read:
            wr.opcode = op->kind == op_kind::write            ? IBV_WR_RDMA_WRITE
                        : op->kind == op_kind::write_with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM
                                                              : IBV_WR_RDMA_READ;
            wr.imm_data = htonl(op->imm);
            wr.wr.rdma.remote_addr = op->remote.address;
            wr.wr.rdma.rkey = op->remote.rkey;
            may_inline = op->kind != op_kind::read;
            break;
        case op_kind::fetch_add:
        case op_kind::compare_swap:
            wr.opcode = op->kind == op_kind::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic.remote_addr = op->remote.address;
            wr.wr.atomic.rkey = op->remote.rkey;
            wr.wr.atomic.compare_add = op->compare_add;
            wr.wr.atomic.swap = op->swap;
            if (atomic_results_ == nullptr) [[unlikely]]
                make_atomic_results();
            if (check_atomic_results_)
                *slot->atomic_result = atomic_poison;
            slot->sges[0] = {reinterpret_cast<std::uint64_t>(slot->atomic_result), 8, slot->atomic_lkey};
            wr.num_sge = 1;
            bytes = 8;
            break;
        case op_kind::recv: break;
        }
        // Small payloads ride inside the work request: the device copies
        // them when the request is posted, reads no buffer and needs no
        // DMA of it (sends and writes of one slice, up to max_inline_data).
        if (may_inline && op->sge_count == 1 && slot->sges[0].length <= qp_->capacity().max_inline_data)
            flags |= IBV_SEND_INLINE;
        connection_tally::per_kind& counts = tally_[op->kind];
        counts.posted.add();
        counts.bytes.add(bytes);
        slot->posted_ms = *turn_ms_;
        slot->posted_tick = op->queued_tick != 0 ? op->queued_tick : *turn_tick_;
        if (event_listener_access::in_drain_pass(*event_listener_)) {
            // Batched doorbell: chained, posted when the pass ends. Only
            // every signal_every_-th request (and the chain's last, see
            // ring) asks for a completion.
            if (++unsignalled_ >= signal_every_) {
                flags |= IBV_SEND_SIGNALED;
                unsignalled_ = 0;
                tally_.signalled.add();
            }
            wr.send_flags = flags;
            if (chain_tail_ != nullptr)
                chain_tail_->wr.next = &wr;
            else
                chain_head_ = slot;
            chain_tail_ = slot;
            event_listener_access::ring_after_drain(*event_listener_, &bell_);
        } else {
            wr.send_flags = flags | IBV_SEND_SIGNALED;
            qp_->post_send(wr);
            append_sent(slot);
            tally_.doorbells.add();
            tally_.signalled.add();
        }
    }
    // The operation's frame keeps its buffers; the slot takes them only if
    // the operation goes away first (take_buffers).
    slot->buffer_count = 0;
    slot->adopted = false;
    slot->op = op;
    slot->ticket = op->ticket;
    op->slot = slot;
}

void connection_state::append_posted(work_slot* slot) noexcept {
    slot->next_in_line = nullptr;
    (posted_tail_ ? posted_tail_->next_in_line : posted_head_) = slot;
    posted_tail_ = slot;
}

void connection_state::append_sent(work_slot* slot) noexcept {
    slot->next_in_line = nullptr;
    (sent_tail_ ? sent_tail_->next_in_line : sent_head_) = slot;
    sent_tail_ = slot;
}

namespace {

// The slot whose request follows `s`'s in a chain (wr.next), or nullptr.
work_slot* chained_after(const work_slot* s) noexcept {
    return s->wr.next != nullptr ? static_cast<work_slot*>(completion_target::from_wr_id(s->wr.next->wr_id))
                                 : nullptr;
}

}  // namespace

void connection_state::on_ring(doorbell* bell) noexcept { static_cast<chain_bell*>(bell)->self->ring(); }

void connection_state::ring() noexcept {
    work_slot* head = std::exchange(chain_head_, nullptr);
    work_slot* tail = std::exchange(chain_tail_, nullptr);
    unsignalled_ = 0;
    if (head == nullptr)
        return;
    // The chain's last request always asks for a completion: it retires
    // every unsignalled one before it.
    if ((tail->wr.send_flags & IBV_SEND_SIGNALED) == 0) {
        tail->wr.send_flags |= IBV_SEND_SIGNALED;
        tally_.signalled.add();
    }
    tail->wr.next = nullptr;
    if (broken_) {
        fail_unposted(head, nullptr);
        return;
    }
    ibv_send_wr* bad = nullptr;
    tally_.doorbells.add();
    int rc = ibv_post_send(qp_->native_handle(), &head->wr, &bad);
    work_slot* s = head;
    while (s != nullptr && !(rc != 0 && &s->wr == bad)) {
        work_slot* next = chained_after(s);
        append_sent(s);
        s = next;
    }
    if (rc == 0 || s == nullptr)
        return;
    std::exception_ptr error;
    try {
        qp_->throw_post_error("ibv_post_send", rc);
    } catch (...) {
        error = std::current_exception();
    }
    if (s != head) {
        // Part of the chain went out, maybe none of it signalled: only a
        // flush completes those now. The device refused a request the
        // library built, so this connection cannot be trusted either.
        shut_down(std::string("ibv_post_send refused a work request the library checked (error ") +
                  std::to_string(rc) + ")");
    }
    fail_unposted(s, error);
}

void connection_state::fail_unposted(work_slot* first, std::exception_ptr error) noexcept {
    // Keep ourselves alive through the resumptions below.
    std::shared_ptr<connection_state> keep = self_while_busy_;
    for (work_slot* s = first; s != nullptr;) {
        work_slot* next = chained_after(s);
        s->wr.next = nullptr;
        operation_base* op = s->op;
        for (std::size_t i = 0; i < s->buffer_count; ++i)
            s->buffers[i] = local_slice{};
        s->buffer_count = 0;
        s->op = nullptr;
        s->next_free = free_send_;
        free_send_ = s;
        if (--outstanding_ == 0)
            self_while_busy_.reset();
        if (op != nullptr) {
            op->slot = nullptr;
            fail(op, error ? error
                           : std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        }
        promote_waiters(false);
        if (op != nullptr)
            op->wake();
        s = next;
    }
}

void connection_state::promote_waiters(bool receive) noexcept {
    if ((receive ? recv_waiters_head_ : send_waiters_head_) == nullptr)
        return;
    for (;;) {
        operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
        bool room = has_free_slot(receive) || (receive && (kept_head_ != nullptr || unadopted_orphans_ > 0));
        if (head == nullptr || !room)
            return;
        operation_base* op = head;
        unlink(op);
        if (!start(op))
            op->wake();
    }
}

void connection_state::enqueue(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
    operation_base*& tail = receive ? recv_waiters_tail_ : send_waiters_tail_;
    (receive ? tally_.recv_waits : tally_.send_waits).add();
    op->waiting = true;
    op->waiting_since_ms = *turn_ms_;
    op->queued_tick = *turn_tick_;
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
    tally_[op->kind].failed.add();
    op->error = std::move(error);
    op->done = true;
}

}  // namespace cordma::detail
