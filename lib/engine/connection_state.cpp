// connection_state: a connection's QP, work slots (credits), the
// operations waiting for a credit, and how completions resume them; and the
// receives whose operation was cancelled, whose messages go to the next recv.
#include "engine/connection_state.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "engine/event_listener_access.hpp"
#include "engine/receive_queue_state.hpp"
#include "engine/shared_receive_state.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"


namespace cordma::detail {

namespace {
/// The vendor id rdma_rxe reports (RXE_VENDOR_ID).
constexpr std::uint32_t rxe_vendor_id = 0xffffff;
/// What an atomic's result slot holds until the device writes the old value.
constexpr std::uint64_t atomic_poison = 0xa70a1c5e'5105e0f1;
}  // namespace

connection_state::connection_state(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<queue_pair> qp,
                                   std::string peer)
    : event_listener_(std::move(el)), qp_(std::move(qp)), peer_(std::move(peer)),
      send_slots_(qp_->capacity().max_send_wr), recv_slots_(qp_->capacity().max_recv_wr),
      atomic_results_(send_slots_.size()) {
    check_atomic_results_ = event_listener_->device()->attributes().vendor_id == rxe_vendor_id;
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
                slot.wr.wr_id = slot.as_wr_id();
                slot.wr.sg_list = slot.sges.data();
            }
            head = &slot;
        }
        return head;
    };
    free_send_ = init(send_slots_, false);
    free_recv_ = init(recv_slots_, true);
    bell_.ring = &connection_state::on_ring;
    bell_.self = this;
    // One completion retires at most a quarter of the send queue, so the
    // queue never runs dry waiting for a completion that comes late (a
    // chain of large writes keeps three quarters of them in flight).
    signal_every_ = static_cast<std::uint32_t>(std::clamp<std::size_t>(send_slots_.size() / 4, 1, 32));
}

connection_state::~connection_state() {
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
    if (receive && unadopted_orphans_ > 0) [[unlikely]] {
        // A cancelled recv's receive is still posted: take its place instead
        // of posting behind it, or the next message would land there and
        // every later one would be one receive late.
        adopt_orphan(op);
        return true;
    }
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
        for (auto& b : slot->buffers)
            b = local_slice{};
        slot->op = nullptr;
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
            sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()), s.lkey()};
        }
        ibv_recv_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        qp_->post_recv(wr);
        append_posted(slot);
    } else {
        // Only the fields this opcode reads: wr_id and sg_list were set when
        // the slot was made, and the rest of the request is never read.
        ibv_send_wr& wr = slot->wr;
        for (std::size_t i = 0; i < op->sge_count; ++i) {
            const local_slice& s = op->local[i];
            slot->sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()),
                             s.lkey()};
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
            if (check_atomic_results_)
                *slot->atomic_result = atomic_poison;
            slot->sges[0] = {reinterpret_cast<std::uint64_t>(slot->atomic_result), 8, slot->atomic_lkey};
            wr.num_sge = 1;
            break;
        case op_kind::recv: break;
        }
        // Small payloads ride inside the work request: the device copies
        // them when the request is posted, reads no buffer and needs no
        // DMA of it (sends and writes of one slice, up to max_inline_data).
        if (may_inline && op->sge_count == 1 && slot->sges[0].length <= qp_->capacity().max_inline_data)
            flags |= IBV_SEND_INLINE;
        if (event_listener_access::in_drain_pass(*event_listener_)) {
            // Batched doorbell: chained, posted when the pass ends. Only
            // every signal_every_-th request (and the chain's last, see
            // ring) asks for a completion.
            if (++unsignalled_ >= signal_every_) {
                flags |= IBV_SEND_SIGNALED;
                unsignalled_ = 0;
                ++counters_.signalled;
            }
            ++counters_.requests;
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
            ++counters_.requests;
            ++counters_.doorbells;
            ++counters_.signalled;
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
        ++counters_.signalled;
    }
    tail->wr.next = nullptr;
    if (broken_) {
        fail_unposted(head, nullptr);
        return;
    }
    ibv_send_wr* bad = nullptr;
    ++counters_.doorbells;
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
            op->continuation.resume();
        s = next;
    }
}

void connection_state::append_sent(work_slot* slot) noexcept {
    slot->next_in_line = nullptr;
    (sent_tail_ ? sent_tail_->next_in_line : sent_head_) = slot;
    sent_tail_ = slot;
}

void connection_state::on_complete(completion_target* target, const ibv_wc& wc) noexcept {
    auto* slot = static_cast<work_slot*>(target);
    if (slot->receive)
        slot->owner->complete(slot, wc);
    else
        slot->owner->complete_send(slot, wc);
}

void connection_state::complete_send(work_slot* slot, const ibv_wc& wc) noexcept {
    // RC completes a send queue in order: this completion means every
    // request posted before it is done, including the unsignalled ones,
    // which report nothing themselves. They succeeded: a failed request
    // always completes with its own error, and so does every request the
    // failure flushed.
    while (sent_head_ != nullptr && sent_head_ != slot) {
        work_slot* earlier = pop_sent();
        ibv_wc retired{};
        retired.wr_id = earlier->as_wr_id();
        retired.status = IBV_WC_SUCCESS;
        retired.qp_num = wc.qp_num;
        complete(earlier, retired);
    }
    if (sent_head_ == slot)
        pop_sent();
    complete(slot, wc);
}

work_slot* connection_state::pop_sent() noexcept {
    work_slot* head = sent_head_;
    sent_head_ = head->next_in_line;
    if (sent_head_ == nullptr)
        sent_tail_ = nullptr;
    head->next_in_line = nullptr;
    return head;
}

void connection_state::take_buffers(work_slot* slot, operation_base* op) noexcept {
    // An adopted receive's message lands in the buffers the slot already
    // has (the cancelled recv's), not in the adopting operation's.
    if (slot->adopted)
        return;
    for (std::size_t i = 0; i < op->sge_count; ++i)
        slot->buffers[i] = std::move(op->local[i]);
    slot->buffer_count = op->sge_count;
}

namespace {

std::size_t capacity(const local_slice* slices, std::size_t count) noexcept {
    std::size_t total = 0;
    for (std::size_t i = 0; i < count; ++i)
        total += slices[i].size();
    return total;
}

// Copies the first `length` bytes spread over `from` into `to`, in order.
void scatter_copy(const local_slice* from, std::size_t from_count, const local_slice* to, std::size_t to_count,
                  std::size_t length) noexcept {
    std::size_t fi = 0, fo = 0, ti = 0, to_off = 0;
    while (length > 0 && fi < from_count && ti < to_count) {
        std::size_t n = std::min({length, from[fi].size() - fo, to[ti].size() - to_off});
        std::memcpy(to[ti].data() + to_off, from[fi].data() + fo, n);
        length -= n;
        fo += n;
        to_off += n;
        if (fo == from[fi].size()) {
            ++fi;
            fo = 0;
        }
        if (to_off == to[ti].size()) {
            ++ti;
            to_off = 0;
        }
    }
}

// The message in `slot` (a cancelled recv's buffer) becomes `op`'s: copied
// into op's buffers, or refused by name if it does not fit (the hardware
// would have failed the receive the same way, breaking the connection; here
// it stays up and only this message is lost, reported to `op`).
void hand_over(const work_slot& slot, std::uint32_t byte_len, operation_base* op, const std::string& peer) {
    if (capacity(op->local.data(), op->sge_count) < byte_len) {
        op->error = std::make_exception_ptr(std::system_error(
            std::make_error_code(std::errc::message_size),
            std::string("connection::") + to_string(op->kind) + " to " + peer + ": the next message (" +
                std::to_string(byte_len) + " bytes) arrived in the buffer of an earlier recv that was cancelled, "
                "and does not fit this recv's " + std::to_string(capacity(op->local.data(), op->sge_count)) +
                " bytes; it is dropped. Give every recv on a connection a buffer as large as the largest message"));
        return;
    }
    scatter_copy(slot.buffers.data(), slot.buffer_count, op->local.data(), op->sge_count, byte_len);
}

}  // namespace

void connection_state::complete(work_slot* slot, const ibv_wc& wc) noexcept {
    if (slot->receive)
        remove_posted(slot);
    if (slot->queue != nullptr) {
        complete_queue_slot(slot, wc);
        return;
    }
    operation_base* op = slot->op;
    if (slot->receive && op == nullptr && wc.status == IBV_WC_SUCCESS) {
        // A cancelled recv's message: keep it, buffer and all, for the next recv.
        --unadopted_orphans_;
        slot->byte_len = wc.byte_len;
        slot->has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
        slot->received_imm = slot->has_imm ? ntohl(wc.imm_data) : 0;
        slot->next_in_line = nullptr;
        (kept_tail_ ? kept_tail_->next_in_line : kept_head_) = slot;
        kept_tail_ = slot;
        std::shared_ptr<connection_state> keep = --outstanding_ == 0 ? std::move(self_while_busy_) : nullptr;
        promote_waiters(true);
        return;
    }
    if (slot->receive && op == nullptr)
        --unadopted_orphans_;
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
            if (op->kind == op_kind::fetch_add || op->kind == op_kind::compare_swap) {
                op->old_value = *slot->atomic_result;
                if (check_atomic_results_ && op->old_value == atomic_poison) [[unlikely]]
                    op->error = atomic_result_lost(op);
            }
            if (slot->adopted)
                hand_over(*slot, wc.byte_len, op, peer_);
        } else if (wc.status == IBV_WC_WR_FLUSH_ERR) {
            // Say why it was flushed: the failure that broke the connection
            // (the peer stopped answering, say), not only "flushed".
            op->error = flushed_error(op, wc);
        }
    }
    for (std::size_t i = 0; i < slot->buffer_count; ++i)
        slot->buffers[i] = local_slice{};
    slot->buffer_count = 0;
    slot->adopted = false;
    if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR && !broken_)
        note_failure(op ? to_string(op->kind) : "abandoned operation", wc);
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

void connection_state::complete_queue_slot(work_slot* slot, const ibv_wc& wc) noexcept {
    receive_queue_state* queue = slot->queue;
    std::shared_ptr<connection_state> keep = --outstanding_ == 0 ? std::move(self_while_busy_) : nullptr;
    if (wc.status == IBV_WC_SUCCESS) {
        queue->on_message(slot, wc);  // may resume a coroutine awaiting next()
        return;
    }
    queue->on_failed(slot, wc);
    if (wc.status != IBV_WC_WR_FLUSH_ERR && !broken_)
        note_failure("receive_queue receive", wc);
}

void connection_state::note_failure(const char* what, const ibv_wc& wc) noexcept {
    const char* meaning = work_completion_meaning(wc.status);
    mark_broken(std::string("an earlier ") + what + " failed with " + ibv_wc_status_str(wc.status) + " (status " +
                std::to_string(static_cast<int>(wc.status)) + ")" + (meaning ? std::string(": ") + meaning : ""));
}

// rxe's completer can take a plain ACK whose PSN is an atomic's last PSN
// for that atomic's completion (it answers a retransmitted write with its
// latest PSN, which may be an atomic whose ATOMIC_ACKNOWLEDGE was lost) and
// complete the atomic successfully without copying its result. Measured
// with raw verbs and no cordma (tests/support/atomic_probe.c, 5% loss,
// fetch_adds beside 4 KiB writes on one QP): 0.3-3% of fetch_adds; never
// without loss, never without writes. The atomic did take effect on the
// peer; its old value is gone. So rather than return whatever the result
// slot held before (the previous atomic's value), the call fails, saying
// so. A true old value equal to the poison would be refused the same way:
// a 1 in 2^64 chance for an arbitrary value, on rxe only.
std::exception_ptr connection_state::atomic_result_lost(const operation_base* op) noexcept {
    try {
        return std::make_exception_ptr(std::system_error(
            make_error_code(errc::atomic_result_lost),
            std::string(to_string(op->kind)) + " to " + peer_ +
                ": the device reported it done but returned no old value (a fault of rxe, Soft-RoCE, when "
                "packets are lost and writes share the queue pair). It was carried out on the peer; its old "
                "value is unknown: read the word to learn where it stands"));
    } catch (...) {
        return std::current_exception();
    }
}

std::exception_ptr connection_state::flushed_error(const operation_base* op, const ibv_wc& wc) noexcept {
    try {
        return std::make_exception_ptr(work_completion_error(
            wc.status, to_string(op->kind), wc.vendor_err, peer_,
            broken_ ? broken_reason_
                    : "the queue pair entered the error state (a request on it failed, or the connection closed)"));
    } catch (...) {
        return std::current_exception();
    }
}

void connection_state::append_posted(work_slot* slot) noexcept {
    slot->next_in_line = nullptr;
    (posted_tail_ ? posted_tail_->next_in_line : posted_head_) = slot;
    posted_tail_ = slot;
}

void connection_state::remove_posted(work_slot* slot) noexcept {
    // Receives complete in posting order, so this is the head; the walk is
    // only for safety.
    work_slot* prev = nullptr;
    for (work_slot* s = posted_head_; s != nullptr; prev = s, s = s->next_in_line)
        if (s == slot) {
            (prev ? prev->next_in_line : posted_head_) = s->next_in_line;
            if (posted_tail_ == s)
                posted_tail_ = prev;
            s->next_in_line = nullptr;
            return;
        }
}

void connection_state::adopt_orphan(operation_base* op) noexcept {
    for (work_slot* s = posted_head_; s != nullptr; s = s->next_in_line)
        if (s->op == nullptr && s->queue == nullptr) {
            --unadopted_orphans_;
            s->op = op;
            s->ticket = op->ticket;
            s->adopted = true;
            op->slot = s;
            return;
        }
}

void connection_state::orphan(work_slot* slot) noexcept {
    slot->op = nullptr;
    if (slot->receive) {
        slot->adopted = false;
        ++unadopted_orphans_;
    }
}

void connection_state::take_kept(operation_base* op) noexcept {
    work_slot* slot = kept_head_;
    kept_head_ = slot->next_in_line;
    if (kept_head_ == nullptr)
        kept_tail_ = nullptr;
    slot->next_in_line = nullptr;
    op->done = true;
    op->status = IBV_WC_SUCCESS;
    op->byte_len = slot->byte_len;
    op->has_imm = slot->has_imm;
    op->received_imm = slot->received_imm;
    hand_over(*slot, slot->byte_len, op, peer_);
    // Freed without promoting waiters: start() runs inside promote_waiters'
    // loop, which takes the next waiter itself (promoting here would resume
    // a later recv before this one).
    for (auto& b : slot->buffers)
        b = local_slice{};
    slot->buffer_count = 0;
    slot->next_free = free_recv_;
    free_recv_ = slot;
}

void connection_state::promote_waiters(bool receive) noexcept {
    if ((receive ? recv_waiters_head_ : send_waiters_head_) == nullptr)
        return;
    for (;;) {
        operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
        work_slot* free = receive ? free_recv_ : free_send_;
        bool room = free != nullptr || (receive && (kept_head_ != nullptr || unadopted_orphans_ > 0));
        if (head == nullptr || !room)
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
    if (op->waiting) {
        unlink(op);
    } else if (op->slot != nullptr && op->slot->op == op) {
        // Orphaned: the completion just frees the slot (a receive's message
        // is kept for the next recv).
        bool receive = op->slot->receive;
        take_buffers(op->slot, op);
        orphan(op->slot);
        op->slot = nullptr;
        if (receive)
            promote_waiters(true);
    }
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
                bool receive = slot.receive;
                take_buffers(&slot, op);
                orphan(&slot);  // the completion will only free the slot
                op->slot = nullptr;
                fail(op, std::make_exception_ptr(
                             receive ? operation_cancelled(
                                           to_string(op->kind), peer_,
                                           "cancelled after its receive was posted; the message that lands in it "
                                           "goes to the next recv on this connection, in order")
                                     : operation_cancelled(to_string(op->kind), peer_,
                                                           "cancelled after it was posted; it may still take "
                                                           "effect at the peer")));
                // A recv waiting for a credit takes the orphan first: it
                // waited longer than whatever the cancelled coroutine does next.
                if (receive)
                    promote_waiters(true);
                op->continuation.resume();
                return;
            }
}

void connection_state::attach_shared_receives(std::shared_ptr<shared_receive_state> srq) {
    srq->attach(qp_->qp_num(), peer_, weak_from_this());
    shared_receives_ = std::move(srq);
}

std::string connection_state::receive_queue_refusal() const {
    if (shared_receives_ != nullptr)
        return "the connection receives through a shared_receive_queue (builder::shared_receives), which takes "
               "every incoming message; await shared_receive_queue::next() instead";
    if (receive_queue != nullptr)
        return "another receive_queue already owns this connection's receives; destroy it first";
    std::size_t live = 0;
    for (const work_slot* s = posted_head_; s != nullptr; s = s->next_in_line)
        live += s->op != nullptr ? 1 : 0;
    for (const operation_base* w = recv_waiters_head_; w != nullptr; w = w->next_waiting)
        ++live;
    if (live > 0)
        return std::to_string(live) + " recv operation" + (live == 1 ? " is" : "s are") +
               " still posted or waiting on it; let them complete (or cancel them) first";
    return {};
}

void connection_state::hand_orphans_to(receive_queue_state* queue, std::vector<work_slot*>& kept,
                                       std::vector<work_slot*>& posted) {
    for (work_slot* s = kept_head_; s != nullptr;) {
        work_slot* next = s->next_in_line;
        s->next_in_line = nullptr;
        s->queue = queue;
        kept.push_back(s);
        s = next;
    }
    kept_head_ = kept_tail_ = nullptr;
    for (work_slot* s = posted_head_; s != nullptr; s = s->next_in_line)
        if (s->op == nullptr && s->queue == nullptr) {
            s->queue = queue;
            posted.push_back(s);
        }
    unadopted_orphans_ = 0;
}

std::size_t connection_state::free_recv_slots() const noexcept {
    std::size_t n = 0;
    for (const work_slot* s = free_recv_; s != nullptr; s = s->next_free)
        ++n;
    return n;
}

work_slot* connection_state::take_recv_slot() noexcept {
    work_slot* slot = free_recv_;
    if (slot != nullptr) {
        free_recv_ = slot->next_free;
        slot->next_free = nullptr;
    }
    return slot;
}

void connection_state::post_receive(work_slot* slot) {
    ibv_sge sges[max_sges];
    for (std::size_t i = 0; i < slot->buffer_count; ++i) {
        const local_slice& b = slot->buffers[i];
        sges[i] = {reinterpret_cast<std::uint64_t>(b.data()), static_cast<std::uint32_t>(b.size()), b.lkey()};
    }
    ibv_recv_wr wr{};
    wr.wr_id = slot->as_wr_id();
    wr.sg_list = sges;
    wr.num_sge = slot->buffer_count;
    qp_->post_recv(wr);
    append_posted(slot);
    count_posted();
}

void connection_state::release_recv_slot(work_slot* slot) noexcept {
    for (auto& b : slot->buffers)
        b = local_slice{};
    slot->buffer_count = 0;
    slot->queue = nullptr;
    slot->op = nullptr;
    slot->adopted = false;
    slot->next_in_line = nullptr;
    slot->next_free = free_recv_;
    free_recv_ = slot;
    promote_waiters(true);
}

void connection_state::take_back_from(receive_queue_state* queue, std::span<work_slot* const> kept) noexcept {
    for (work_slot* s = posted_head_; s != nullptr; s = s->next_in_line)
        if (s->queue == queue) {
            s->queue = nullptr;
            orphan(s);
        }
    for (work_slot* s : kept) {
        s->queue = nullptr;
        s->next_in_line = nullptr;
        (kept_tail_ ? kept_tail_->next_in_line : kept_head_) = s;
        kept_tail_ = s;
    }
}

void connection_state::mark_broken(const std::string& why) noexcept {
    broken_ = true;
    broken_reason_ = why;
    detail::logf(log_level::info, "cordma: connection to %s (QP %u) ended: %s", peer_.c_str(), qp_->qp_num(),
                 why.c_str());
    fail_waiters();
    if (receive_queue != nullptr)
        receive_queue->on_broken();
    if (shared_receives_ != nullptr)
        shared_receives_->on_broken(qp_->qp_num(), peer_, why);
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
        detail::logf(log_level::error, "cordma: shutting down connection to %s: %s", peer_.c_str(), e.what());
    }
}

}  // namespace cordma::detail
