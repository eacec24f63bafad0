// receive_queue_state: a receive_queue's slots, the messages that arrived
// for nobody yet, the coroutines awaiting next(), and how the receives go
// back to the connection when the queue does.
#include "engine/receive_queue_state.hpp"
#include "log/logf.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cordma::detail {

receive_queue_state::receive_queue_state(std::shared_ptr<connection_state> connection,
                                         std::vector<local_slice> buffers)
    : message_queue_state(connection->event_listener(), "receive_queue", connection->peer()),
      connection_(std::move(connection)), buffers_(std::move(buffers)), own_count_(buffers_.size()) {}

void receive_queue_state::open() {
    connection_state& c = *connection_;
    const std::string where = "receive_queue(" + std::to_string(buffers_.size()) + " buffers) on the connection to " +
                              c.peer();
    if (c.broken())
        throw disconnected_error("receive_queue", c.peer(), c.broken_reason());
    if (std::string refusal = c.receive_queue_refusal(); !refusal.empty())
        throw std::logic_error(where + ": " + refusal);
    std::size_t free = c.free_recv_slots();
    if (buffers_.size() > free)
        throw std::invalid_argument(where + ": only " + std::to_string(free) + " of its " +
                                    std::to_string(c.qp()->capacity().max_recv_wr) +
                                    " receive-queue entries are free; use fewer buffers, or a deeper receive queue "
                                    "(builder::recv_queue_depth)");

    // What cancelled recvs left behind comes first: their messages arrived
    // (or will arrive) before any in our own buffers.
    std::vector<work_slot*> kept, posted;
    c.hand_orphans_to(this, kept, posted);
    auto multi = [](const work_slot* s) { return s->buffer_count > 1; };
    if (std::any_of(kept.begin(), kept.end(), multi) || std::any_of(posted.begin(), posted.end(), multi)) {
        // A message spread over several buffers cannot be one span: give
        // them back and refuse, rather than truncate.
        c.take_back_from(this, kept);
        throw std::logic_error(where + ": a recv with a scatter list was cancelled after posting, and its message "
                                      "is still to be taken; let a recv take it first");
    }
    borrowed_ = kept;
    borrowed_.insert(borrowed_.end(), posted.begin(), posted.end());
    posted_ = posted.size();
    for (work_slot* s : kept)
        append_arrived(s);
    idle_.reserve(own_count_ + borrowed_.size());
    attached_ = true;
    c.receive_queue = this;

    for (local_slice& buffer : buffers_) {
        work_slot* slot = c.take_recv_slot();
        slot->buffers[0] = std::move(buffer);
        slot->buffer_count = 1;
        slot->queue = this;
        try {
            post(slot);
        } catch (...) {
            // What was posted stays posted: hand it all back, as if the
            // queue were destroyed, and report why.
            idle_.push_back(slot);
            close();
            throw;
        }
    }
    buffers_.clear();
}

void receive_queue_state::close() noexcept {
    if (!attached_)
        return;
    attached_ = false;
    connection_->receive_queue = nullptr;
    std::vector<work_slot*> kept;
    try {
        kept.reserve(own_count_ + borrowed_.size());
    } catch (...) {
        // Out of memory: the messages nobody took are dropped below.
    }
    while (work_slot* s = pop_arrived()) {
        if (kept.size() < kept.capacity())
            kept.push_back(s);
        else
            connection_->release_recv_slot(s);
    }
    connection_->take_back_from(this, kept);
    for (work_slot* s : idle_)
        connection_->release_recv_slot(s);
    idle_.clear();
    borrowed_.clear();
    cancel_waiters();
}

void receive_queue_state::post(work_slot* slot) {
    connection_->post_receive(slot);
    ++posted_;
}

bool receive_queue_state::finished() const noexcept {
    // A receive that failed (not flushed) is the last message this queue
    // will see: an RC receive queue completes in order, so every message
    // before it is already delivered, and every receive after it can only
    // be flushed. Debian 12's rxe (6.1) flushes those only when its
    // responder runs again, which may be never: waiting for them kept a
    // peer's oversize frame from failing next() at all.
    return receive_error_ || (connection_->broken() && posted_ == 0);
}

void receive_queue_state::on_message(work_slot* slot, const ibv_wc& wc) noexcept {
    --posted_;
    slot->byte_len = wc.byte_len;
    slot->has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
    slot->received_imm = slot->has_imm ? ntohl(wc.imm_data) : 0;
    slot->source_qp = wc.qp_num;
    deliver(slot);
}

void receive_queue_state::on_failed(work_slot* slot, const ibv_wc& wc) noexcept {
    --posted_;
    if (wc.status != IBV_WC_WR_FLUSH_ERR && !receive_error_) {
        try {
            receive_error_ = std::make_exception_ptr(
                work_completion_error(wc.status, call(), wc.vendor_err, connection_->peer()));
        } catch (...) {
            receive_error_ = std::current_exception();
        }
    }
    idle_.push_back(slot);  // reserved: never allocates
    // The caller marks the connection broken next if this was an error; a
    // flush means it is broken already.
    if (finished())
        fail_waiters();
}

std::exception_ptr receive_queue_state::broken_error() const {
    if (receive_error_)
        return receive_error_;
    try {
        return std::make_exception_ptr(
            disconnected_error(call(), connection_->peer(), connection_->broken_reason()));
    } catch (...) {
        return std::current_exception();
    }
}

void receive_queue_state::on_broken() noexcept {
    if (finished())
        fail_waiters();
}

void receive_queue_state::release(work_slot* slot) noexcept {
    if (!attached_ || is_borrowed(slot)) {
        // Not ours to post again: the queue is gone (the connection takes
        // the slot back), or the buffer was a cancelled recv's.
        if (attached_)
            std::erase(borrowed_, slot);
        connection_->release_recv_slot(slot);
        return;
    }
    if (connection_->broken()) {
        idle_.push_back(slot);
        return;
    }
    try {
        if (refill_)
            refill_->refill(slot->buffers[0]);
        post(slot);
        ++reposts_;
    } catch (const std::exception& e) {
        // A queue that silently shrank would be a trap: say why, and stop.
        idle_.push_back(slot);
        detail::logf(log_level::error, "cordma: receive_queue on the connection to %s: %s", connection_->peer().c_str(),
                     e.what());
        connection_->shut_down(std::string("a receive_queue could not post a receive again: ") + e.what());
    }
}

bool receive_queue_state::is_borrowed(work_slot* slot) const noexcept {
    return !borrowed_.empty() && std::find(borrowed_.begin(), borrowed_.end(), slot) != borrowed_.end();
}

}  // namespace cordma::detail
