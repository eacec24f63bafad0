// connection_state, cancelled and abandoned operations: a waiting one is
// dropped; a posted one is orphaned, its slot keeping the buffers until the
// completion. An orphaned receive stays posted: the next recv adopts it, or
// the message that lands in it is kept for the next recv.
#include "engine/connection_state.hpp"
#include "engine/rail_stripes.hpp"

#include <algorithm>
#include <cstring>
#include <system_error>

namespace cordma::detail {

void connection_state::abandon(operation_base* op) noexcept {
    if (op->pieces_left != 0 && stripes_ != nullptr) {
        // Its pieces may hold the last reference to this state.
        auto keep = shared_from_this();
        stripes_->abandon(op);
        return;
    }
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
    if (stripes_ != nullptr && stripes_->cancel(op, ticket))
        return;
    // `op` may be long gone: find it among the live ones before touching it.
    for (operation_base* head : {send_waiters_head_, recv_waiters_head_})
        for (operation_base* w = head; w != nullptr; w = w->next_waiting)
            if (w == op && w->ticket == ticket) {
                unlink(op);
                fail(op, std::make_exception_ptr(operation_cancelled(to_string(op->kind), peer_)));
                op->wake();
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
                op->wake();
                return;
            }
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

void connection_state::orphan(work_slot* slot) noexcept {
    slot->op = nullptr;
    if (slot->receive) {
        slot->adopted = false;
        ++unadopted_orphans_;
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
    hand_over(*slot, slot->byte_len, op);
    if (op->error) {
        tally_[op_kind::recv].failed.add();
    } else {
        tally_[op_kind::recv].completed.add();
        tally_[op_kind::recv].bytes.add(slot->byte_len);
    }
    // Freed without promoting waiters: start() runs inside promote_waiters'
    // loop, which takes the next waiter itself (promoting here would resume
    // a later recv before this one).
    for (auto& b : slot->buffers)
        b = local_slice{};
    slot->buffer_count = 0;
    slot->next_free = free_recv_;
    free_recv_ = slot;
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

}  // namespace

// The message in `slot` (a cancelled recv's buffer) becomes `op`'s: copied
// into op's buffers, or refused by name if it does not fit (the hardware
// would have failed the receive the same way, breaking the connection; here
// it stays up and only this message is lost, reported to `op`).
void connection_state::hand_over(const work_slot& slot, std::uint32_t byte_len, operation_base* op) const {
    if (capacity(op->local.data(), op->sge_count) < byte_len) {
        op->error = std::make_exception_ptr(std::system_error(
            std::make_error_code(std::errc::message_size),
            std::string("connection::") + to_string(op->kind) + " to " + peer_ + ": the next message (" +
                std::to_string(byte_len) + " bytes) arrived in the buffer of an earlier recv that was cancelled, "
                "and does not fit this recv's " + std::to_string(capacity(op->local.data(), op->sge_count)) +
                " bytes; it is dropped. Give every recv on a connection a buffer as large as the largest message"));
        return;
    }
    scatter_copy(slot.buffers.data(), slot.buffer_count, op->local.data(), op->sge_count, byte_len);
}

}  // namespace cordma::detail
