// message_queue_state: the messages that arrived for nobody yet, the
// coroutines awaiting next(), and handing one to the other, shared by
// receive_queue and shared_receive_queue.
#include "engine/message_queue_state.hpp"

#include <string>
#include <system_error>

#include <cordma/error.hpp>

namespace cordma::detail {

message_queue_state::message_queue_state(std::shared_ptr<cordma::event_listener> el, const char* kind,
                                         std::string source)
    : event_listener_(std::move(el)), kind_(kind), call_(std::string(kind) + "::next"), source_(std::move(source)) {}

void message_queue_state::resume_with(next_operation* op, std::exception_ptr error) noexcept {
    op->error_ = std::move(error);
    op->done_ = true;
    if (op->timer_)
        op->timer_->cancel();
    op->continuation_.resume();
}

bool message_queue_state::hand_to_waiter(work_slot* slot) noexcept {
    next_operation* op = waiters_head_;
    if (op == nullptr)
        return false;
    // The waiter may drop the last handle to this queue once resumed;
    // callers return right after a true, touching nothing more.
    std::shared_ptr<message_queue_state> keep = weak_from_this().lock();
    unlink(op);
    op->slot_ = slot;
    resume_with(op, nullptr);
    return true;
}

void message_queue_state::deliver(work_slot* slot) noexcept {
    if (hand_to_waiter(slot))
        return;
    append_arrived(slot);
}

void message_queue_state::fail_waiters() noexcept {
    // A resumed waiter may drop the last handle to this queue (its
    // coroutine ends, and with it whatever owned the queue): stay alive
    // until the loop is done.
    std::shared_ptr<message_queue_state> keep = weak_from_this().lock();
    while (next_operation* op = waiters_head_) {
        unlink(op);
        resume_with(op, broken_error());
    }
}

void message_queue_state::cancel_waiters() noexcept {
    std::shared_ptr<message_queue_state> keep = weak_from_this().lock();
    while (next_operation* op = waiters_head_) {
        unlink(op);
        std::exception_ptr error;
        try {
            error = std::make_exception_ptr(
                operation_cancelled(call(), source_, std::string("the ") + kind_ + " was destroyed"));
        } catch (...) {
            error = std::current_exception();
        }
        resume_with(op, std::move(error));
    }
}

bool message_queue_state::wait(next_operation* op) noexcept {
    try {
        if (!attached_) {
            op->error_ = std::make_exception_ptr(
                operation_cancelled(call(), source_, std::string("the ") + kind_ + " was destroyed"));
        } else if (work_slot* s = pop_arrived()) {
            op->slot_ = s;
        } else if (finished()) {
            op->error_ = broken_error();
        } else if (op->token_.stop_requested()) {
            // Stopped while hopping here: the canceller found nothing yet.
            op->error_ = std::make_exception_ptr(operation_cancelled(call(), source_));
        } else {
            // Weak: a timer outlives the wait it bounds (it is only flagged
            // when the message comes first), and holding the queue would
            // hold its connections and its event listener until it fires.
            if (op->timeout_.count() >= 0)
                op->timer_ = event_listener_->call_after(op->timeout_, [weak = weak_from_this(), op, ticket = op->ticket_] {
                    if (auto self = weak.lock())
                        self->cancel(op, ticket, true);
                });
            op->waiting_ = true;
            op->next_waiting_ = nullptr;
            op->prev_waiting_ = waiters_tail_;
            (waiters_tail_ ? waiters_tail_->next_waiting_ : waiters_head_) = op;
            waiters_tail_ = op;
            return true;
        }
    } catch (...) {
        op->error_ = std::current_exception();
    }
    op->done_ = true;
    return false;
}

void message_queue_state::cancel(next_operation* op, std::uint64_t ticket, bool timed_out) noexcept {
    for (next_operation* w = waiters_head_; w != nullptr; w = w->next_waiting_) {
        if (w != op || w->ticket_ != ticket)
            continue;
        unlink(op);
        std::exception_ptr error;
        try {
            if (timed_out) {
                auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(op->timeout_).count();
                error = std::make_exception_ptr(std::system_error(
                    std::make_error_code(std::errc::timed_out),
                    call_ + " from " + source_ + ": no message within " + std::to_string(ms) +
                        " ms (none was taken; a later one goes to the next next())"));
            } else {
                error = std::make_exception_ptr(operation_cancelled(call(), source_, "no message was taken"));
            }
        } catch (...) {
            error = std::current_exception();
        }
        op->error_ = std::move(error);
        op->done_ = true;
        // A timer that fired is done; only a cancelled wait stops its timer.
        if (op->timer_ && !timed_out)
            op->timer_->cancel();
        op->continuation_.resume();
        return;
    }
}

void message_queue_state::abandon(next_operation* op) noexcept {
    if (op->waiting_)
        unlink(op);
    if (op->timer_)
        op->timer_->cancel();
}

void message_queue_state::put_back(work_slot* slot) noexcept {
    if (!attached_) {
        release(slot);
        return;
    }
    if (hand_to_waiter(slot))
        return;
    slot->next_in_line = arrived_head_;
    arrived_head_ = slot;
    if (arrived_tail_ == nullptr)
        arrived_tail_ = slot;
}

void message_queue_state::append_arrived(work_slot* slot) noexcept {
    slot->next_in_line = nullptr;
    (arrived_tail_ ? arrived_tail_->next_in_line : arrived_head_) = slot;
    arrived_tail_ = slot;
}

work_slot* message_queue_state::pop_arrived() noexcept {
    work_slot* slot = arrived_head_;
    if (slot != nullptr) {
        arrived_head_ = slot->next_in_line;
        if (arrived_head_ == nullptr)
            arrived_tail_ = nullptr;
        slot->next_in_line = nullptr;
    }
    return slot;
}

void message_queue_state::unlink(next_operation* op) noexcept {
    (op->prev_waiting_ ? op->prev_waiting_->next_waiting_ : waiters_head_) = op->next_waiting_;
    (op->next_waiting_ ? op->next_waiting_->prev_waiting_ : waiters_tail_) = op->prev_waiting_;
    op->next_waiting_ = op->prev_waiting_ = nullptr;
    op->waiting_ = false;
}

}  // namespace cordma::detail
