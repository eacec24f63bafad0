// connection_state, completions: a work completion frees its slot and
// resumes its operation (or goes to the receive_queue that owns the slot);
// a send completion retires the unsignalled requests posted before it; a
// failure breaks the connection and names why.
#include "engine/connection_state.hpp"

#include <arpa/inet.h>

#include <system_error>

#include "engine/receive_queue_state.hpp"
#include "verbs/check.hpp"

namespace cordma::detail {

void connection_state::on_complete(completion_target* target, const ibv_wc& wc) noexcept {
    auto* slot = static_cast<work_slot*>(target);
    slot->owner->tally_.count_completion(wc.status);
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
                hand_over(*slot, wc.byte_len, op);
        } else if (wc.status == IBV_WC_WR_FLUSH_ERR) {
            // Say why it was flushed: the failure that broke the connection
            // (the peer stopped answering, say), not only "flushed".
            op->error = flushed_error(op, wc);
        }
        connection_tally::per_kind& counts = tally_[op->kind];
        if (wc.status != IBV_WC_SUCCESS || op->error) [[unlikely]] {
            counts.failed.add();
        } else {
            counts.completed.add();
            if (slot->receive)
                counts.bytes.add(wc.byte_len);
            else
                latency_[static_cast<std::size_t>(op->kind)].record(*turn_tick_ - slot->posted_tick);
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
        op->wake();
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

void connection_state::complete_queue_slot(work_slot* slot, const ibv_wc& wc) noexcept {
    receive_queue_state* queue = slot->queue;
    std::shared_ptr<connection_state> keep = --outstanding_ == 0 ? std::move(self_while_busy_) : nullptr;
    if (wc.status == IBV_WC_SUCCESS) {
        tally_[op_kind::recv].completed.add();
        tally_[op_kind::recv].bytes.add(wc.byte_len);
        queue->on_message(slot, wc);  // may resume a coroutine awaiting next()
        return;
    }
    tally_[op_kind::recv].failed.add();
    // A failed receive wakes next() at once (receive_queue_state::finished),
    // and the coroutine it resumes may drop the last handle to this
    // connection: stay alive to mark it broken.
    if (!keep)
        keep = weak_from_this().lock();
    queue->on_failed(slot, wc);
    if (wc.status != IBV_WC_WR_FLUSH_ERR && !broken_)
        note_failure("receive_queue receive", wc);
}

void connection_state::note_failure(const char* what, const ibv_wc& wc) noexcept {
    const char* meaning = work_completion_meaning(wc.status);
    mark_broken(std::string("an earlier ") + what + " failed with " + ibv_wc_status_str(wc.status) + " (status " +
                std::to_string(static_cast<int>(wc.status)) + ")" + (meaning ? std::string(": ") + meaning : ""),
                disconnect_cause::failed_completion);
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

}  // namespace cordma::detail
