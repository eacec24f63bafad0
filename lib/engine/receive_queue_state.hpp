#pragma once
/// What a receive_queue is underneath: the connection's receive slots it
/// took, the messages that arrived and nobody took yet (in arrival order), the
/// coroutines awaiting next() (in the order they came), and the error to
/// give once the connection is broken. Touched only on the event listener
/// thread; owned through a shared_ptr by the receive_queue handle, its
/// messages and its pending next() calls.

#include <chrono>
#include <exception>
#include <memory>
#include <vector>

#include <cordma/receive_queue.hpp>
#include "engine/connection_state.hpp"

namespace cordma::detail {

class receive_queue_state : public std::enable_shared_from_this<receive_queue_state> {
public:
    using next_operation = receive_queue::next_operation;

    receive_queue_state(std::shared_ptr<connection_state> connection, std::vector<local_slice> buffers);
    receive_queue_state(const receive_queue_state&) = delete;
    receive_queue_state& operator=(const receive_queue_state&) = delete;

    connection_state& connection() const noexcept { return *connection_; }
    const std::shared_ptr<connection_state>& connection_ptr() const noexcept { return connection_; }
    std::size_t size() const noexcept { return own_count_; }

    /// Event listener thread. Takes the connection's receives over and posts
    /// one per buffer. Throws (std::logic_error, std::invalid_argument,
    /// disconnected_error, verbs_error) leaving the connection as it was.
    void open();
    /// Event listener thread. Gives the receives back to the connection
    /// (posted ones become orphans, messages nobody took are kept for the
    /// next recv) and fails every pending next() with operation_cancelled.
    void close() noexcept;

    // Completions of the queue's slots (from connection_state::complete).
    void on_message(work_slot* slot, const ibv_wc& wc) noexcept;
    void on_failed(work_slot* slot, const ibv_wc& wc) noexcept;
    /// The connection broke: pending next() calls fail once every receive
    /// still posted has completed (flushed).
    void on_broken() noexcept;

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
    /// Gives `slot`'s message to the longest-waiting next(), if any.
    bool hand_to_waiter(work_slot* slot) noexcept;
    /// Event listener thread. The user is done with a message: post its
    /// buffer again (or free it, once the queue or connection is gone).
    void release(work_slot* slot) noexcept;

    /// Runs `fn` on the event listener thread: inline if already there.
    template <class F>
    void on_listener_thread(F&& fn) {
        const auto& listener = connection_->event_listener();
        if (listener->running_in_this_thread())
            fn();
        else
            listener->post(std::forward<F>(fn));
    }

private:
    void append_arrived(work_slot* slot) noexcept;
    work_slot* pop_arrived() noexcept;
    void unlink(next_operation* op) noexcept;
    std::exception_ptr broken_error() const;
    bool finished() const noexcept;
    void post(work_slot* slot);
    void fail_waiters() noexcept;
    bool is_borrowed(work_slot* slot) const noexcept;

    std::shared_ptr<connection_state> connection_;
    std::vector<local_slice> buffers_;  // until open() posts them
    std::size_t own_count_ = 0;
    // Slots taken over from the connection (kept messages, orphans of
    // cancelled recvs): their buffers are not ours, so they are freed, not
    // posted again, when done.
    std::vector<work_slot*> borrowed_;
    // Every slot the queue holds that is not posted and not with the user:
    // failed or flushed once the connection broke.
    std::vector<work_slot*> idle_;
    work_slot* arrived_head_ = nullptr;
    work_slot* arrived_tail_ = nullptr;
    next_operation* waiters_head_ = nullptr;
    next_operation* waiters_tail_ = nullptr;
    // Receives of ours posted and not completed. Once the connection is
    // broken they all complete (flushed, after any message that arrived:
    // an RC receive queue completes in order), and only then does next()
    // fail, so it never fails while a message may still be in the CQ.
    std::size_t posted_ = 0;
    std::exception_ptr receive_error_;  // the first failed receive of ours
    bool attached_ = false;
};

}  // namespace cordma::detail
