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
#include "engine/receive_refill.hpp"
#include "engine/message_queue_state.hpp"

namespace cordma::detail {

class receive_queue_state final : public message_queue_state {
public:
    receive_queue_state(std::shared_ptr<connection_state> connection, std::vector<local_slice> buffers);

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

    void release(work_slot* slot) noexcept override;

    /// From now on `refill` sees every buffer before it is posted again.
    void set_refill(std::shared_ptr<receive_refill> refill) noexcept { refill_ = std::move(refill); }
    /// Receives of its own posted again so far (after the first `size()`).
    std::uint64_t reposts() const noexcept { return reposts_; }

private:
    bool finished() const noexcept override;
    std::exception_ptr broken_error() const override;
    void post(work_slot* slot);
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
    // Receives of ours posted and not completed. Once the connection is
    // broken they all complete (flushed, after any message that arrived:
    // an RC receive queue completes in order), and only then does next()
    // fail, so it never fails while a message may still be in the CQ. A
    // receive that failed ends the queue at once (finished()).
    std::size_t posted_ = 0;
    std::exception_ptr receive_error_;  // the first failed receive of ours
    std::shared_ptr<receive_refill> refill_;
    std::uint64_t reposts_ = 0;
};

}  // namespace cordma::detail
