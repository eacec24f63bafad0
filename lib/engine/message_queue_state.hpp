#pragma once
/// What every queue of received messages has, whatever its receives are
/// posted on: the messages that arrived and nobody took yet (in arrival
/// order), the coroutines awaiting next() (in the order they came), handing
/// one to the other, cancellation and deadlines. Two kinds derive from it:
/// a receive_queue (one connection's receive queue, receive_queue_state)
/// and a shared_receive_queue (an SRQ that many connections receive
/// through, shared_receive_state). received_message and next() talk to
/// this base only. Touched only on the event listener thread; owned through
/// a shared_ptr by the public handle, its messages and its pending next()
/// calls.

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <cordma/event_listener.hpp>
#include <cordma/receive_queue.hpp>
#include "engine/work_slot.hpp"

namespace cordma::detail {

class message_queue_state : public std::enable_shared_from_this<message_queue_state> {
public:
    using next_operation = receive_queue::next_operation;

    /// `kind` names the queue in errors ("receive_queue"), `source` whom
    /// messages come from (the peer, or the queue's connections).
    message_queue_state(std::shared_ptr<cordma::event_listener> el, const char* kind, std::string source);
    virtual ~message_queue_state() = default;
    message_queue_state(const message_queue_state&) = delete;
    message_queue_state& operator=(const message_queue_state&) = delete;

    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }
    /// "receive_queue::next", as errors name the call.
    const char* call() const noexcept { return call_.c_str(); }
    const std::string& source() const noexcept { return source_; }

    /// Event listener thread. Hands `op` the oldest message, or fails it, and
    /// returns false (the caller resumes it); or queues it and returns true.
    bool wait(next_operation* op) noexcept;
    /// Event listener thread. Fails `op` with operation_cancelled (or, if
    /// `timed_out`, std::errc::timed_out) if it is still the waiter that
    /// started with `ticket` (it may be long gone).
    void cancel(next_operation* op, std::uint64_t ticket, bool timed_out) noexcept;
    /// Event listener thread. `op`'s coroutine is going away while it waits
    /// (one that was handed its message or failed is no longer linked, and
    /// its timer was stopped then, on this thread).
    void abandon(next_operation* op) noexcept;
    /// Event listener thread. A message taken by next() that never reached
    /// its coroutine: first in line again.
    void put_back(work_slot* slot) noexcept;
    /// Event listener thread. The user is done with a message: post its
    /// buffer again (or free it, once the queue is gone).
    virtual void release(work_slot* slot) noexcept = 0;

    /// Runs `fn` on the event listener thread: inline if already there.
    template <class F>
    void on_event_listener_thread(F&& fn) {
        if (event_listener_->running_in_this_thread())
            fn();
        else
            event_listener_->post(std::forward<F>(fn));
    }

protected:
    /// A message arrived in `slot` (byte_len, imm and source filled in):
    /// to the longest-waiting next(), or kept in arrival order.
    void deliver(work_slot* slot) noexcept;
    /// Gives `slot`'s message to the longest-waiting next(), if any.
    bool hand_to_waiter(work_slot* slot) noexcept;
    /// Keeps `slot`'s message, last in line.
    void append_arrived(work_slot* slot) noexcept;
    /// The oldest message nobody took, or nullptr.
    work_slot* pop_arrived() noexcept;
    /// Every pending next() throws broken_error() (no more will come).
    void fail_waiters() noexcept;
    /// Every pending next() throws operation_cancelled: the queue is gone.
    void cancel_waiters() noexcept;

    /// Whether no message will ever come again: next() then fails with
    /// broken_error() once every kept one is taken.
    virtual bool finished() const noexcept = 0;
    virtual std::exception_ptr broken_error() const = 0;

    /// The public handle still exists (false once it closed the queue).
    bool attached_ = false;

private:
    void unlink(next_operation* op) noexcept;
    void resume_with(next_operation* op, std::exception_ptr error) noexcept;

    std::shared_ptr<cordma::event_listener> event_listener_;
    const char* kind_;
    std::string call_;
    std::string source_;
    work_slot* arrived_head_ = nullptr;
    work_slot* arrived_tail_ = nullptr;
    next_operation* waiters_head_ = nullptr;
    next_operation* waiters_tail_ = nullptr;
};

}  // namespace cordma::detail
