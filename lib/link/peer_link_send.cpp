// peer_link, sending: credits, send slots, inline data frames, rts frames
// (the peer reads the payload and answers with a fin) and control frames.
#include "link/peer_link.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <utility>

#include <cordma/error.hpp>

#include "engine/connection_state.hpp"

namespace cordma::detail {

namespace wire = link_wire;

task<std::size_t> peer_link::wait_slot(std::stop_token token) {
    auto self = shared_from_this();
    while (!data_slot_free() || !pending_control_.empty()) {
        std::optional<bool> freed;
        {
            counted_wait waiting(slot_waiters_);
            freed = co_await slot_freed_->pop(token, send_call_, name_);
        }
        if (!freed)
            link_gone();
    }
    co_return take_data_slot();
}

std::size_t peer_link::take_data_slot() {
    if (growth_ != growth::grown)
        return take_slot();
    std::size_t s = free_big_.back();
    free_big_.pop_back();
    return s;
}

void peer_link::wake_slot_waiters() {
    for (std::uint32_t i = 0; i < slot_waiters_; ++i)
        slot_freed_->push(true);
}

std::size_t peer_link::take_slot() {
    if (free_slots_.empty())
        throw std::logic_error("cordma: " + name_ + ": no send slot free (internal error)");
    std::size_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
}

void peer_link::post_slot(std::size_t slot, std::size_t length) {
    frame_send* s;
    if (idle_sends_.empty()) {
        s = &frame_sends_.emplace_back();
        s->link = this;
        s->on_done = &peer_link::frame_sent;
        idle_sends_.reserve(frame_sends_.size());  // frame_sent's push_back never allocates
    } else {
        s = idle_sends_.back();
        idle_sends_.pop_back();
    }
    // The link stays while its frames are in flight, as their coroutines
    // kept it before.
    if (in_flight_++ == 0)
        self_while_sending_ = shared_from_this();
    ++next_frame_;
    // As fresh as an awaited one: what the connection reads and writes.
    // (Not by assigning a new operation_base: its four slices' reference
    // counts made that 300 instructions a frame.)
    s->slot = nullptr;
    s->next_waiting = s->prev_waiting = nullptr;
    s->waiting = false;
    s->ticket = 0;
    s->done = false;
    s->status = IBV_WC_SUCCESS;
    s->vendor_error = 0;
    s->byte_len = 0;
    s->has_imm = false;
    s->send_slot = slot;
    try {
        const local_mr& region = slot < small_slot_count_ ? small_slots_ : big_slots_;
        s->connection = connection_access::state(conn_).get();
        if (s->connection == nullptr)
            throw std::logic_error("cordma: " + name_ + ": the link's connection is gone (internal error)");
        s->kind = op_kind::send;
        s->local[0] = region.slice(static_cast<std::size_t>(slot_data(slot) - region.data()), length);
        s->sge_count = 1;
        if (!start_operation(s, nullptr))
            s->wake();  // failed before it was posted
    } catch (...) {
        s->error = std::current_exception();
        s->done = true;
        s->wake();
    }
}

void peer_link::frame_sent(operation_base* op) noexcept {
    auto* s = static_cast<frame_send*>(op);
    peer_link* self = s->link;
    std::size_t slot = s->send_slot;
    std::string failure;
    bool failed = s->error || s->status != IBV_WC_SUCCESS;
    if (failed) {
        try {
            s->rethrow_if_failed();
            failure = "a frame's send failed";
        } catch (const std::exception& e) {
            failure = e.what();
        } catch (...) {
            failure = "a frame's send failed";
        }
    }
    s->error = nullptr;
    s->local[0] = local_slice{};  // pins no region while idle
    self->idle_sends_.push_back(s);  // reserved: no allocation
    // Nothing of `s` is touched from here: slot_done may post it again.
    try {
        self->slot_done(slot);
        // A failed send means the connection broke. The receives may not
        // flush at once (rxe flushes them only when its responder next
        // runs), so do not wait for the dispatcher to see it (send_failed:
        // sends fail now, takes after a grace period).
        if (failed)
            self->send_failed(failure);
    } catch (...) {  // nothing to tell: the link's waits see the failure
    }
    if (--self->in_flight_ == 0) {
        std::shared_ptr<peer_link> keep = std::move(self->self_while_sending_);  // may be the last handle
        if (self->drain_waiting_) {
            self->drain_waiting_ = false;
            try {
                self->idle_->push(true);
            } catch (...) {
            }
        }
    }
}

void peer_link::slot_done(std::size_t slot) {
    if (slot >= small_slot_count_) {
        free_big_.push_back(slot);
        if (growth_ != growth::grown && free_big_.size() == big_slot_count_) {
            free_big_.clear();  // shrunk, and every big slot is back: the region goes
            big_slots_ = local_mr{};
        }
    } else {
        free_slots_.push_back(slot);
        if (!pending_control_.empty()) {
            pending_control c = std::move(pending_control_.front());
            pending_control_.pop_front();
            send_control(c.header, c.payload);
        }
    }
    // A data frame waits for a slot of its kind and for the control frames
    // ahead of it. Wake one once both hold, whichever slot came back: once
    // grown, data takes big slots, and the small slot that carried the last
    // pending control frame out must wake it too (a lossy link, where slots
    // come back late and control frames queue, hung on that).
    if (slot_waiters_ > 0 && pending_control_.empty() && data_slot_free())
        slot_freed_->push(true);
}

void peer_link::send_control(wire::header h, const std::string& payload) {
    if (free_slots_.empty()) {
        // A credit frame waiting already will carry the newest `acked`.
        bool credit_waiting = h.type == wire::frame::credit &&
                              std::any_of(pending_control_.begin(), pending_control_.end(), [](const pending_control& c) {
                                  return c.header.type == wire::frame::credit;
                              });
        if (!credit_waiting)
            pending_control_.push_back(pending_control{h, payload});
        return;
    }
    std::size_t slot = take_slot();
    h.acked = handled_;
    acked_sent_ = handled_;
    if (h.type == wire::frame::abort)
        h.size = payload.size();  // a room frame's size is the room it grants
    std::byte* at = slot_data(slot);
    std::size_t header = wire::encode(h, std::span<std::byte, wire::header_size>(at, wire::header_size));
    std::memcpy(at + header, payload.data(), payload.size());
    post_slot(slot, header + payload.size());
}

task<void> peer_link::send(wire::header h, local_slice payload, std::stop_token token) {
    auto self = shared_from_this();
    if (needs_room(payload.size()))
        co_await make_room(payload.size(), token);
    std::size_t slot = co_await credit_and_slot(token);
    if (payload.size() <= inline_room()) {
        post_inline(slot, h, std::span<const std::byte>(payload.data(), payload.size()));
        co_return;
    }
    post_rts(slot, h, payload);
    std::optional<wire::header> fin = co_await fins_->pop(token, send_call_, name_);
    if (!fin)
        link_gone();
    if (fin->seq != h.seq || fin->step != h.step) {
        std::string why = name_ + " finished reading " + op_name(fin->op) + " #" + std::to_string(fin->seq) +
                          " step " + std::to_string(fin->step) + ", but this side sent " + op_name(h.op) + " #" +
                          std::to_string(h.seq) + " step " + std::to_string(h.step);
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error, why, rank_, true);
        throw_owner_failure();
    }
}

void peer_link::post_rts(std::size_t slot, wire::header h, const local_slice& payload) {
    std::byte* at = slot_data(slot);
    h.acked = handled_;
    acked_sent_ = handled_;
    h.type = wire::frame::rts;
    h.size = payload.size();
    remote_slice where = payload.remote();
    h.addr = where.address;
    h.rkey = where.rkey;
    // Its keys on our rails too, so the peer's read is striped over them.
    h.rails = static_cast<std::uint8_t>(std::min<std::size_t>(where.rails, 1 + wire::max_rail_keys));
    for (std::size_t i = 0; i + 1 < h.rails; ++i)
        h.rail_rkeys[i] = where.rail_rkeys[i];
    if (!peer_reads_traces_)
        h.trace = {};
    // Every slot holds at least first_frame_size: 48 bytes and 200 more.
    post_slot(slot, wire::encode(h, std::span<std::byte>(at, wire::max_header_size)));
}

void peer_link::post_inline(std::size_t slot, wire::header h, std::span<const std::byte> payload) {
    if (!peer_reads_traces_)
        h.trace = {};
    h.type = wire::frame::data;
    std::size_t room = room_at(next_frame_);
    std::size_t holds = (slot < small_slot_count_ ? small_slot_size_ : big_slot_size_) - wire::header_length(h);
    if (payload.size() > room || payload.size() > holds)
        throw std::logic_error("cordma: " + name_ + ": an inline frame of " + std::to_string(payload.size()) +
                               " bytes where the peer's receive holds " + std::to_string(room) + " and the slot " +
                               std::to_string(holds) + " (internal error)");
    if (payload.size() > small_payload)
        ++big_frames_;
    std::byte* at = slot_data(slot);
    h.acked = handled_;
    acked_sent_ = handled_;
    h.type = wire::frame::data;
    h.size = payload.size();
    std::size_t header = wire::encode(h, std::span<std::byte>(at, wire::header_length(h)));
    if (!payload.empty())
        std::memcpy(at + header, payload.data(), payload.size());
    post_slot(slot, header + payload.size());
}

task<void> peer_link::send_inline(wire::header h, std::span<const std::byte> payload, std::stop_token token) {
    if (payload.size() > eager_size_)
        throw std::logic_error("cordma: " + name_ + ": an inline frame of " + std::to_string(payload.size()) +
                               " bytes, over the eager size (internal error)");
    // The caller checked it against inline_room(); the room only grows
    // while a send waits (check_idle shrinks it only with none waiting).
    auto self = shared_from_this();
    std::size_t slot = co_await credit_and_slot(token);
    post_inline(slot, h, payload);
}

void peer_link::send_inline_now(wire::header h, std::span<const std::byte> payload) {
    if (!can_send_now() || payload.size() > inline_room())
        throw std::logic_error("cordma: " + name_ + ": send_inline_now with no credit, slot or room for " +
                               std::to_string(payload.size()) + " bytes (internal error)");
    credits_->try_pop();
    std::size_t slot = take_data_slot();
    ++sent_;
    post_inline(slot, h, payload);
}

task<std::size_t> peer_link::credit_and_slot(std::stop_token token) {
    auto self = shared_from_this();
    counted_wait waiting(senders_waiting_);  // check_idle shrinks only with none
    std::optional<bool> credit = co_await credits_->pop(token, send_call_, name_);
    if (!credit)
        link_gone();
    std::size_t slot = 0;
    std::exception_ptr error;
    try {
        slot = co_await wait_slot(token);
    } catch (...) {
        error = std::current_exception();
    }
    if (error) {
        credits_->push(true);  // nothing was sent: the credit stays for the next frame
        std::rethrow_exception(error);
    }
    ++sent_;
    co_return slot;
}

}  // namespace cordma::detail
