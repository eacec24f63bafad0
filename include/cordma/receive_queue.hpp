#pragma once
/// \file
/// Receives posted ahead of the peer's sends, drained by a coroutine.
///
/// A receive_queue takes a connection's receives over: it keeps one receive
/// posted per buffer at all times, so every SEND (and send_with_imm,
/// write_with_imm) the peer makes lands at once, whether or not anyone is
/// awaiting it, and is kept until `co_await queue.next()` takes it, in
/// arrival order:
///
///     receive_queue queue(conn, 16, 4096);           // 16 receives of 4 KiB posted now
///     for (;;) {
///         received_message m = co_await queue.next();  // the oldest message not yet taken
///         handle(m.bytes(), m.imm());
///     }                                                // m's buffer is posted again here
///
/// Contract:
/// - Posting: the constructor posts every receive before it returns. A
///   message's buffer is posted again when its received_message is released
///   (destroyed, or release()), so at most `size()` messages can be held at
///   once. While all are held, the peer's sends wait in receiver-not-ready
///   retries (builder::rnr_retry, min_rnr_timer); if those run out, the
///   peer's send fails and the connection breaks, so release messages
///   promptly, or give the queue as many buffers as messages may be held.
/// - Order: next() yields messages in arrival order, which is the order the
///   peer sent them; several coroutines awaiting next() are served in the
///   order they started waiting.
/// - Threads: next() resumes its coroutine on the event listener thread,
///   inline, as the completion arrives (or at once, if a message is already
///   waiting); awaited from another thread it hops there once (one small
///   allocation). Nothing is allocated per message on the event listener
///   thread: buffers and slots are preallocated, and awaiting and releasing
///   there allocate nothing (a next() with a timeout sets one timer, which
///   allocates). Releasing a message on another thread hops to the event
///   listener thread (one small allocation).
/// - Cancellation loses nothing: a next() cancelled through its
///   std::stop_token (or whose timeout runs out) throws operation_cancelled
///   (or std::system_error with std::errc::timed_out) and takes no message;
///   a message arriving afterwards goes to the next next(). A coroutine
///   destroyed while awaiting next() takes no message either.
/// - Errors: each buffer must hold the largest message the peer sends; a
///   longer one fails its receive (a local length error; rxe reports a
///   local QP operation error) and breaks the connection. Once the
///   connection is broken (closed by either side, an error, the peer gone),
///   next() still returns every message that arrived, then throws:
///   work_completion_error if one of the queue's own receives failed,
///   otherwise disconnected_error naming the peer and why. No message that
///   reached the completion queue is ever behind the error: after a broken
///   connection next() throws once every receive still posted has been
///   flushed, and after a receive of its own failed, at once (the receive
///   queue completes in order, so only flushes can follow it; some devices,
///   rxe among them, flush those late or not at all). Messages held by the
///   user stay valid after that.
/// - Sharing the connection: the queue owns the receive queue of the
///   connection. While it exists, connection::recv and recv_imm fail with
///   std::logic_error (they would take messages meant for the queue, or the
///   queue theirs); a queue cannot be made while recv operations are posted
///   or waiting. Messages that arrived in cancelled recvs' buffers and
///   receives those leave posted are taken over, first, so switching from
///   recv to a queue loses nothing. When the queue is destroyed, its posted
///   receives and the messages nobody took go back to the connection: the
///   next recvs get them in order (copied into their buffers).
/// - Lifetime: the queue keeps its connection, and its buffers, alive; so
///   does every received_message. A received_message's bytes stay valid
///   until it is released, even after the queue is gone. A receive_queue is
///   a handle (move-only); destroying it makes pending next() calls throw
///   operation_cancelled. The receives it leaves posted are the
///   connection's, and like any posted receive keep their buffers alive
///   until they complete: with a message, or flushed when the connection
///   closes (close(), shut_down(), the peer going, or the connection's last
///   handle dropped: the queue holds one, so dropping the queue and the
///   connection's other handles closes it, see connection).

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <utility>
#include <vector>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/export.hpp>
#include <cordma/local_mr.hpp>

namespace cordma {

namespace detail {
class message_queue_state;
class receive_queue_state;
struct receive_queue_access;
struct work_slot;
}  // namespace detail

/// One message a receive_queue received: a view of its buffer, its length and
/// its immediate. Move-only; releasing it (destruction or release()) posts
/// the buffer again for the next message, so keep it only as long as you
/// need the bytes.
class CORDMA_API received_message {
public:
    /// An empty message (what a moved-from one is): bytes() is empty.
    received_message() = default;
    /// Takes over `other`'s buffer; `other` is left empty. Inline, as is
    /// the destructor's test for an empty message: a message is moved
    /// through several coroutines on its way to the reader (14 moves and
    /// 18 destructions per stream round trip, callgrind 2026-11-29), and
    /// each was a call into the library.
    received_message(received_message&& other) noexcept
        : queue_(std::move(other.queue_)), slot_(std::exchange(other.slot_, nullptr)),
          data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
          imm_(std::exchange(other.imm_, std::nullopt)), qp_num_(other.qp_num_) {}
    /// Releases this message's buffer (posted again), then takes over
    /// `other`'s; `other` is left empty.
    received_message& operator=(received_message&& other) noexcept;
    received_message(const received_message&) = delete;
    received_message& operator=(const received_message&) = delete;
    ~received_message() {
        if (slot_ != nullptr)
            release();
    }

    /// True while it holds a message (not empty, moved from or released).
    explicit operator bool() const noexcept { return slot_ != nullptr; }
    /// The message: the first size() bytes of its buffer, writable (decode
    /// in place if you like). Valid until release.
    std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
    /// The message's first byte (nullptr when empty). Valid until release.
    std::byte* data() const noexcept { return data_; }
    /// The message's length in bytes (0 when empty; a zero-length message
    /// is possible too).
    std::size_t size() const noexcept { return size_; }
    /// The immediate, if the peer sent one (send_with_imm, write_with_imm).
    std::optional<std::uint32_t> imm() const noexcept { return imm_; }
    /// The number of the QP the message arrived on (its completion's
    /// qp_num): with a shared_receive_queue, which connection sent it
    /// (compare connection::qp()->qp_num(), or ask the queue's source()).
    std::uint32_t qp_num() const noexcept { return qp_num_; }
    /// The whole buffer the message landed in, as a slice (e.g. to send the
    /// bytes on, with size() of it). Await anything using it before the
    /// release: the buffer is then posted again.
    local_slice buffer() const;

    /// Gives the buffer back to the queue, which posts it again (or, once the
    /// queue or connection is gone, frees it). Idempotent; any thread.
    void release() noexcept;

private:
    friend class receive_queue;
    std::shared_ptr<detail::message_queue_state> queue_;
    detail::work_slot* slot_ = nullptr;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::optional<std::uint32_t> imm_;
    std::uint32_t qp_num_ = 0;
};

/// Keeps receives posted on a connection and yields what arrives, in order
/// (the contract is at the top of this header).
class CORDMA_API receive_queue {
public:
    class next_operation;

    /// An empty handle: next() throws std::logic_error.
    receive_queue() = default;
    /// Posts `count` receives of `buffer_size` bytes each on `conn`, in one
    /// region allocated from `pool` (which must be on the connection's
    /// protection domain), or, without a pool, registered for the queue alone.
    /// Throws std::invalid_argument for a count of 0 or above the free
    /// entries of the connection's receive queue (builder::recv_queue_depth),
    /// or a buffer_size of 0; std::logic_error for an empty connection, or one
    /// whose receives are taken (another queue, recv operations pending);
    /// disconnected_error if the connection is broken. Blocks until the event
    /// listener thread has posted them (inline when called there).
    receive_queue(cordma::connection conn, std::size_t count, std::size_t buffer_size,
                  std::shared_ptr<memory_pool> pool = nullptr);
    /// Posts one receive per slice of `buffers` (each of them needs
    /// local_write access, and the connection's protection domain); the
    /// slices keep their regions alive as long as the queue or a message
    /// uses them. Throws as the constructor above.
    receive_queue(cordma::connection conn, std::vector<local_slice> buffers);
    /// Takes over `other`'s receives; `other` becomes an empty handle.
    receive_queue(receive_queue&& other) noexcept = default;
    /// Gives the current receives back to the connection (see the contract)
    /// and takes `other`'s.
    receive_queue& operator=(receive_queue&& other) noexcept;
    receive_queue(const receive_queue&) = delete;
    receive_queue& operator=(const receive_queue&) = delete;
    ~receive_queue();

    /// False for an empty (default-constructed or moved-from) handle.
    explicit operator bool() const noexcept { return state_ != nullptr; }

    /// The next message, in arrival order; waits until one arrives. Lazy: it
    /// starts when awaited. Throws operation_cancelled if `token` is stopped
    /// first (no message is taken), and the connection's error once it is
    /// broken and every message that arrived has been taken.
    next_operation next(std::stop_token token = {});
    /// As next(token), but throws std::system_error (std::errc::timed_out),
    /// taking no message, if none arrives within `timeout`.
    next_operation next(std::chrono::nanoseconds timeout, std::stop_token token = {});

    /// How many receives the queue keeps posted (its buffers).
    std::size_t size() const;
    /// The connection it receives on.
    const cordma::connection& connection() const;

    /// The awaitable next() returns; it lives in the awaiting coroutine's
    /// frame and allocates nothing. Movable until awaited.
    class CORDMA_API next_operation {
    public:
        /// Moves a not yet awaited operation (into when_all, a task's
        /// parameter, ...).
        next_operation(next_operation&& other) noexcept;
        next_operation(const next_operation&) = delete;
        next_operation& operator=(const next_operation&) = delete;
        /// A coroutine destroyed while waiting stops waiting here; no
        /// message is taken.
        ~next_operation();

        /// Never ready: the wait starts in await_suspend.
        bool await_ready() const noexcept { return false; }
        /// Takes a waiting message at once (returns false: the caller goes
        /// on), or waits in line for the next one, resumed on the event
        /// listener thread; awaited from another thread, hops there first.
        /// Arms the stop token and the timeout.
        bool await_suspend(std::coroutine_handle<> h);
        /// The message. Throws operation_cancelled (stopped), std::system_error
        /// with std::errc::timed_out (the timeout ran out), or the
        /// connection's error once it broke and no message is left.
        received_message await_resume();

    private:
        friend class receive_queue;
        friend class shared_receive_queue;
        friend class detail::message_queue_state;
        /// Runs on whichever thread stops the token; the cancellation itself
        /// happens on the event listener thread.
        struct CORDMA_API canceller {
            std::shared_ptr<detail::message_queue_state> queue;
            next_operation* op;
            std::uint64_t ticket;
            void operator()() const noexcept;
        };
        next_operation(std::shared_ptr<detail::message_queue_state> queue, std::chrono::nanoseconds timeout,
                       std::stop_token token) noexcept;

        std::shared_ptr<detail::message_queue_state> queue_;
        std::chrono::nanoseconds timeout_;
        std::stop_token token_;
        std::optional<std::stop_callback<canceller>> cancel_callback_;
        std::shared_ptr<event_listener::timer> timer_;
        std::coroutine_handle<> continuation_;
        next_operation* next_waiting_ = nullptr;
        next_operation* prev_waiting_ = nullptr;
        std::uint64_t ticket_ = 0;
        bool waiting_ = false;
        bool done_ = false;
        detail::work_slot* slot_ = nullptr;  // the message, once handed over
        std::exception_ptr error_;
    };

private:
    friend struct detail::receive_queue_access;
    void start(std::vector<local_slice> buffers);
    void close() noexcept;
    const std::shared_ptr<detail::receive_queue_state>& checked_state(const char* call) const;

    cordma::connection connection_;
    std::shared_ptr<detail::receive_queue_state> state_;
};

}  // namespace cordma
