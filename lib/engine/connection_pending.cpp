// connection_state's part of a stuck report (stuck_report.hpp): every
// operation it holds that has not finished, where it is, and since when.
#include "engine/connection_state.hpp"

#include <cstring>

namespace cordma::detail {

namespace {

std::uint64_t bytes_of(const operation_base& op) noexcept {
    if (op.kind == op_kind::fetch_add || op.kind == op_kind::compare_swap)
        return 8;
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < op.sge_count; ++i)
        n += op.local[i].size();
    return n;
}

}  // namespace

void connection_state::collect_pending(std::uint64_t now_ms, std::vector<pending_operation>& out) const {
    std::uint32_t qp_num = qp_->qp_num();
    auto add = [&](const operation_base& op, pending_stage stage, std::uint64_t since_ms) {
        pending_operation p;
        p.peer = peer_;
        p.qp_num = qp_num;
        p.role = role_;
        p.kind = op.kind;
        p.stage = stage;
        p.age = std::chrono::milliseconds(now_ms > since_ms ? now_ms - since_ms : 0);
        p.bytes = bytes_of(op);
        out.push_back(std::move(p));
    };
    // Posted: the chain not rung yet (this pass's), then those rung, in
    // posting order. A slot whose operation went (an orphan) has nobody
    // waiting on it.
    for (const work_slot* s = chain_head_; s != nullptr;
         s = s->wr.next != nullptr ? static_cast<const work_slot*>(completion_target::from_wr_id(s->wr.next->wr_id))
                                   : nullptr)
        if (s->op != nullptr)
            add(*s->op, pending_stage::posted, s->posted_ms);
    for (const work_slot* s = sent_head_; s != nullptr; s = s->next_in_line)
        if (s->op != nullptr)
            add(*s->op, pending_stage::posted, s->posted_ms);
    // Receives a recv waits on (a receive_queue's standing ones are not
    // operations anyone awaits one by one, nor are those of a QP whose
    // owner said so: receives_are_standing).
    for (const work_slot* s = posted_head_; s != nullptr && !standing_receives_; s = s->next_in_line)
        if (s->op != nullptr)
            add(*s->op, pending_stage::receive_posted, s->posted_ms);
    for (const operation_base* op = send_waiters_head_; op != nullptr; op = op->next_waiting)
        add(*op, pending_stage::send_queue_full, op->waiting_since_ms);
    for (const operation_base* op = recv_waiters_head_; op != nullptr; op = op->next_waiting)
        add(*op, pending_stage::receive_queue_full, op->waiting_since_ms);
}

}  // namespace cordma::detail
