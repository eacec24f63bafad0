// connection_state, for a receive_queue (lib/engine/receive_queue_state.cpp):
// the queue takes the connection's receive slots, the messages kept for the
// next recv and the orphaned receives, and gives them back when it goes.
#include "engine/connection_state.hpp"

namespace cordma::detail {

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
    std::size_t n = recv_slots_.capacity() - recv_slots_.made();  // not made yet
    for (const work_slot* s = free_recv_; s != nullptr; s = s->next_free)
        ++n;
    return n;
}

work_slot* connection_state::take_recv_slot() noexcept {
    return take_slot(true);
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
    tally_[op_kind::recv].posted.add();
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

}  // namespace cordma::detail
