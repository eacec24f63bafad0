#pragma once
/// \file
/// An RC connection and its awaitable operations.
///
/// Every operation follows one contract:
/// - It starts when co_awaited, not when called; calling it only checks the
///   arguments (slices are bounds-checked where they are made, and invalid
///   arguments throw std::invalid_argument before anything is posted: sizes
///   that differ, misaligned atomics, a remote slice whose access does not
///   allow the operation, e.g. a write into a read-only grant).
/// - The awaiting coroutine is resumed on the event listener thread, inline,
///   when the work completion arrives (run to completion: no thread hop).
/// - Buffers: the operation shares ownership of the local regions it names
///   until its completion (or flush) arrives, even if the awaiting coroutine
///   is destroyed or cancelled first. Remote regions are the peer's business.
/// - When the send (or receive) queue is full the operation waits, in FIFO
///   order, for a free entry; it never fails for lack of room.
/// - Failure: a failed work completion throws work_completion_error (status,
///   operation, vendor error, peer); after one, the QP is in error, every
///   pending operation completes with an error and new ones throw
///   disconnected_error. A std::stop_token, when given, cancels the wait:
///   the operation throws operation_cancelled, and its buffers stay alive
///   until the hardware is done with them. A send, write, read or atomic
///   cancelled after posting may still take effect.
/// - Receives lose nothing. A recv (or recv_imm) cancelled after posting, or
///   whose coroutine is destroyed, cannot take its receive back from the
///   hardware: the peer's next message lands in its buffer. That message is
///   not dropped: it goes to the next recv on this connection, in order
///   (copied into that recv's buffers), whether that recv is already
///   waiting or comes later; its operation_cancelled says so. RC receives
///   complete in posting order, so the next recv takes the cancelled one's
///   place instead of posting behind it. If the message does not fit the
///   next recv's buffers, that recv throws std::system_error
///   (std::errc::message_size) naming both sizes, and the connection stays
///   up. Messages that arrived this way are still delivered after the
///   connection breaks. To keep receives posted ahead of the peer's sends,
///   use a receive_queue (<cordma/receive_queue.hpp>); while one exists, it
///   owns the connection's receives and recv throws std::logic_error.
/// - Allocation: none per operation on the event listener thread. Awaiting from
///   another thread hops to the event listener once (one small allocation).
/// - Doorbells and completions (automatic, nothing to configure). A send,
///   write, read or atomic awaited while the event listener is handing out
///   completions (i.e. by a coroutine one of them resumed) is chained with
///   the others posted in that drain pass, and the chain goes out with one
///   ibv_post_send when the pass ends; awaited anywhere else, it is posted at
///   once. Only the last request of a chain, and every Nth request of one (N
///   is a quarter of the send queue, at most 32), asks for a completion: RC
///   completes a send queue in order, so one completion resumes every
///   operation posted before it, in posting order. A request that fails
///   still completes with its own error, and fails only its own operation;
///   those behind it are flushed, each with its own error, as always.
/// - Inline data: a send or write of one slice of at most the QP's
///   max_inline_data bytes (builder::max_inline_data, 64 by default) is
///   copied into the work request when it is posted. The device never reads
///   the buffer, so it needs no DMA and its local key is not checked.

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>
#include <utility>

#include <cordma/agent_call.hpp>
#include <cordma/agent_limits.hpp>
#include <cordma/error.hpp>
#include <cordma/export.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/remote_slice.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/task.hpp>
#include <cordma/detail/operation.hpp>

namespace cordma {

/// What a receive got: how many bytes landed, and the immediate value if
/// the sender attached one (send_with_imm, write_with_imm).
struct CORDMA_API recv_result {
    /// recv: the bytes of the message, written into the receive's buffers
    /// in order from the first slice. recv_imm: the length the device
    /// reports for the peer's write (its data went where the writer aimed
    /// it, not into a receive buffer).
    std::size_t length = 0;
    /// The sender's immediate value, or nothing for a plain send.
    std::optional<std::uint32_t> imm;
};

namespace detail {

/// Starts `op` on its connection: posts it, or queues it for a credit, from
/// the event listener thread; from any other thread it hops there first,
/// and fails it as cancelled there if `stop` (the token its canceller
/// watches, null without one) was stopped meanwhile.
/// Returns false if it finished at once (failed before posting).
CORDMA_API bool start_operation(operation_base* op, const std::stop_token* stop);
/// The coroutine awaiting `op` is going away before its completion.
CORDMA_API void abandon_operation(operation_base* op) noexcept;
/// Fails `op` with operation_cancelled before it starts.
CORDMA_API void cancel_before_start(operation_base* op) noexcept;

/// Runs on whichever thread requests the stop; hands the cancellation to the
/// event listener thread, where the operation's state lives.
struct CORDMA_API canceller {
    operation_base* op;
    std::uint64_t ticket;
    void operator()() const noexcept;
};

CORDMA_API std::uint64_t next_cancellation_ticket() noexcept;
struct connection_access;

}  // namespace detail

/// The awaitable every operation returns. `Result` is what co_await yields.
template <class Result>
class [[nodiscard]] operation : private detail::operation_base {
public:
    /// Movable until awaited (into when_all, a task parameter, ...); once
    /// started, the event listener points into it and it stays put in its frame.
    operation(operation&& other) noexcept
        : detail::operation_base(static_cast<detail::operation_base&&>(other)), token_(std::move(other.token_)) {}
    operation(const operation&) = delete;
    operation& operator=(const operation&) = delete;
    ~operation() {
        // A coroutine destroyed mid-operation: let go of the frame but not
        // of the buffers (the slot keeps them until the completion).
        if (!done && (slot != nullptr || waiting || pieces_left != 0))
            detail::abandon_operation(this);
    }

    /// Never ready: the operation starts in await_suspend.
    bool await_ready() const noexcept { return false; }
    /// Starts the operation (posts it, queues it for room in the send or
    /// receive queue, or hops to the event listener thread first when
    /// awaited from another thread) and arms the stop token's callback.
    /// Returns false, resuming the caller at once, when the operation ended
    /// before it was posted (stop already requested, the connection already
    /// failed).
    bool await_suspend(std::coroutine_handle<> h) {
        continuation = h;
        if (token_.stop_possible()) {
            if (token_.stop_requested()) {
                detail::cancel_before_start(this);
                return false;
            }
            ticket = detail::next_cancellation_ticket();
            cancel_callback_.emplace(token_, detail::canceller{this, ticket});
        }
        return detail::start_operation(this, cancel_callback_ ? &token_ : nullptr);
    }
    /// What the operation produced: nothing for send, write and read; a
    /// recv_result for recv and recv_imm; the word's old value for
    /// fetch_add and compare_swap. Throws what the operation failed with:
    /// work_completion_error (a failed work completion: status, operation,
    /// peer), disconnected_error (the connection broke before or while it
    /// ran), operation_cancelled (its stop token), std::system_error
    /// (message_size: a message larger than the receive's buffers).
    Result await_resume() {
        cancel_callback_.reset();
        if (error || status != IBV_WC_SUCCESS) [[unlikely]]
            rethrow_if_failed();
        if constexpr (std::is_same_v<Result, recv_result>) {
            return recv_result{byte_len, has_imm ? std::optional<std::uint32_t>(received_imm) : std::nullopt};
        } else if constexpr (std::is_same_v<Result, std::uint64_t>) {
            return old_value;
        }
    }

private:
    friend class connection;
    struct arguments {
        std::span<const local_slice> sg_list;
        /// A single slice the operation may take over instead of copying
        /// (an argument passed by value): one reference-count update less.
        local_slice* owned = nullptr;
        remote_slice remote{};
        std::uint32_t imm = 0;
        std::uint64_t compare_add = 0;
        std::uint64_t swap = 0;
    };
    // Built in place (returned as a prvalue): an operation never moves, so
    // nothing can point into a stale copy of it.
    operation(detail::connection_state* state, detail::op_kind op_kind, std::stop_token token,
              const arguments& args)
        : token_(std::move(token)) {
        connection = state;
        kind = op_kind;
        if (args.owned != nullptr) {
            local[0] = std::move(*args.owned);
            sge_count = 1;
        } else {
            for (std::size_t i = 0; i < args.sg_list.size(); ++i)
                local[i] = args.sg_list[i];
            sge_count = static_cast<std::uint8_t>(args.sg_list.size());
        }
        remote = args.remote;
        imm = args.imm;
        compare_add = args.compare_add;
        swap = args.swap;
    }

    std::stop_token token_;
    std::optional<std::stop_callback<detail::canceller>> cancel_callback_;
};

/// One rail of a connection (builder::rails; connection::rails()).
struct CORDMA_API rail_info {
    /// The device it runs on ("rxe1").
    std::string device;
    /// Its queue pair's number.
    std::uint32_t qp_num = 0;
    /// False once it failed (its link went down, the peer stopped
    /// answering on it) or the connection ended.
    bool up = true;
    /// Why it is down ("" while up): the failure that ended it.
    std::string why_down;
    /// What its queue pair counted (the pieces of striped writes and reads
    /// it carried, and on rail 0 everything else).
    connection_counters counters;
};

/// A connected RC queue pair served by an event listener. A cheap handle:
/// copies refer to the same connection (the library's own, a receive_queue's
/// or a stream's, count as copies too).
///
/// Dropping the last copy without close() closes the connection as a
/// socket's close() does, in the background: sends, writes, reads and
/// atomics already posted get up to 5 s (dropped_linger) to finish, then
/// the peer is told (a graceful disconnect, as close()), receives still
/// posted are flushed, and the queue pair, its regions and memory go once
/// the hardware is done with them. Nothing is left behind, whatever was
/// posted; close() is still the way to know when it is done.
class CORDMA_API connection {
public:
    /// How long the last handle going lets the sends already posted finish
    /// before the connection is closed anyway.
    static constexpr std::chrono::seconds dropped_linger{5};

    /// An empty handle: every call but operator bool throws std::logic_error.
    connection() = default;
    /// Another handle to the same connection (counted: see the class).
    connection(const connection& other) noexcept;
    /// Takes `other`'s reference; `other` is left empty.
    connection(connection&& other) noexcept = default;
    /// Drops this handle's connection (closing it if this was its last
    /// handle), then refers to `other`'s.
    connection& operator=(const connection& other) noexcept;
    /// Drops this handle's connection (closing it if this was its last
    /// handle), then takes `other`'s reference; `other` is left empty.
    connection& operator=(connection&& other) noexcept;
    /// The last handle going closes the connection (see the class).
    ~connection();
    /// Wraps a queue pair that is already connected (state RTS) and whose
    /// CQs were made by `event_listener`. `peer` names the other side in errors.
    static connection adopt(std::shared_ptr<cordma::event_listener> event_listener, std::shared_ptr<queue_pair> qp,
                            std::string peer);

    /// False for an empty (default-constructed or moved-from) handle. Says
    /// nothing about the connection's health: a broken connection is still
    /// a non-empty handle whose operations throw disconnected_error.
    explicit operator bool() const noexcept { return state_ != nullptr; }
    /// The other side, as errors name it ("10.0.0.2:7471").
    const std::string& peer() const;
    /// The data queue pair (for ibv_query_qp and friends).
    const std::shared_ptr<queue_pair>& qp() const;
    /// The event listener whose thread serves this connection.
    const std::shared_ptr<cordma::event_listener>& event_listener() const;
    /// What the data queue pair counted so far (metrics.hpp): operations
    /// by kind, bytes, completions by status, doorbells. Any thread; each
    /// counter is exact as of the moment it is read.
    connection_counters counters() const;
    /// What this connection's agent granted to the peer and received from
    /// it (metrics.hpp): grants, denials, how each grant ended, the
    /// regions and bytes granted now. Any thread. Throws std::logic_error
    /// if the connection has no agent (as the agent's calls do).
    agent_counters agent_metrics() const;

    /// The private data the peer sent while the connection was set up,
    /// for connections made with builder::agent(false): on an accepted
    /// connection, the client's connect request's; on a connecting one, the
    /// listener's accept's. Over rdma_cm the connection manager pads it
    /// with zeros to its message's size (on RoCE and InfiniBand, 56 bytes
    /// for a connect request, 196 for an accept), so it may end in zeros
    /// the peer did not send; over the TCP exchange it is exactly the peer's
    /// builder::private_data. Empty on connections with an agent (cordma's
    /// handshake uses the private data itself), from connect_loopback and
    /// from adopt. Valid as long as a handle to the connection is.
    std::span<const std::byte> peer_private_data() const;

    /// Whether the memory-region agent serves this connection (builder
    /// connections with builder::agent(true), the default, and
    /// connect_loopback); without it the agent's calls throw
    /// std::logic_error.
    bool has_agent() const;

    /// SEND `local` to the peer's next posted receive. RC's rule: a send
    /// longer than the receive the peer posted for it fails on both ends
    /// and breaks the connection (the work_completion_error says so: on
    /// rxe IBV_WC_REM_OP_ERR here, IBV_WC_LOC_QP_OP_ERR at the receiver;
    /// elsewhere REM_INV_REQ_ERR and LOC_LEN_ERR). Keep every send within
    /// the receives the peer posts (or use a stream, a group or rpc, whose
    /// frames are sized for you).
    operation<void> send(local_slice local, std::stop_token token = {});
    /// SEND with a 32-bit immediate the receiver gets in recv_result::imm.
    operation<void> send_with_imm(local_slice local, std::uint32_t imm, std::stop_token token = {});
    /// Posts a receive into `local` and waits for the peer's SEND. After a
    /// recv was cancelled once posted, takes that one's message first (see
    /// "Receives lose nothing" above). std::logic_error while a
    /// receive_queue owns the connection's receives. A message longer than
    /// `local` breaks the connection (RC's rule, see send): the error says
    /// that a message longer than the posted buffer arrived.
    operation<recv_result> recv(local_slice local, std::stop_token token = {});
    /// Posts a receive with several buffers, filled in order.
    operation<recv_result> recv(std::span<const local_slice> sg_list, std::stop_token token = {});
    /// Waits for the peer's write_with_imm (or a zero-length send_with_imm):
    /// consumes a receive without a buffer, yields the immediate.
    operation<recv_result> recv_imm(std::stop_token token = {});

    /// RDMA WRITE `local` to `remote` (the sizes must match).
    operation<void> write(local_slice local, remote_slice remote, std::stop_token token = {});
    /// RDMA WRITE gathering several local slices into one remote range.
    operation<void> write(std::span<const local_slice> sg_list, remote_slice remote, std::stop_token token = {});
    /// RDMA WRITE with immediate: the peer's recv_imm yields `imm`.
    operation<void> write_with_imm(local_slice local, remote_slice remote, std::uint32_t imm,
                                   std::stop_token token = {});
    /// RDMA READ `remote` into `local` (the sizes must match).
    operation<void> read(local_slice local, remote_slice remote, std::stop_token token = {});
    /// RDMA READ scattering one remote range into several local slices.
    operation<void> read(std::span<const local_slice> sg_list, remote_slice remote, std::stop_token token = {});

    /// Atomically adds `add` to the 8-byte word at `remote`; yields its old value.
    ///
    /// On rxe (Soft-RoCE) only: under packet loss, with writes on the same
    /// queue pair, rxe completes a few atomics without writing their old
    /// value. cordma notices (the result word is poisoned before posting)
    /// and throws std::system_error with cordma::errc::atomic_result_lost
    /// (equal to std::errc::io_error) saying so, instead of yielding a
    /// stale value. The atomic was carried out on the
    /// peer; read the word to learn where it stands. Applies to
    /// compare_swap too.
    operation<std::uint64_t> fetch_add(remote_slice remote, std::uint64_t add, std::stop_token token = {});
    /// Atomically replaces the word at `remote` with `swap` if it equals
    /// `compare`; yields its old value (equal to `compare` when it swapped).
    operation<std::uint64_t> compare_swap(remote_slice remote, std::uint64_t compare, std::uint64_t swap,
                                          std::stop_token token = {});

    /// Moves the QP to ERROR: every pending operation completes with an error,
    /// new ones throw disconnected_error. Thread-safe.
    void shut_down();

    /// Disconnects gracefully: the peer is told (its operations already
    /// posted, such as a waiting recv, come back flushed:
    /// work_completion_error with IBV_WC_WR_FLUSH_ERR, equal to
    /// std::errc::connection_aborted, whose message names this side's
    /// disconnect; operations it starts later throw disconnected_error),
    /// then this side shuts down as above. Lazy; resumes on the event listener thread; never throws for
    /// a connection that is already broken or closed.
    task<void> close();

    // ---- The memory-region agent (docs/agent-protocol.md) ----------------
    // Connections from a builder (unless made with builder::agent(false))
    // or connect_loopback have an agent; the others (has_agent() is false)
    // do not, and these calls throw std::logic_error naming the call.
    // All are lazy, resume on the event listener thread, and throw
    // disconnected_error once the connection is gone.
    //
    // Every call that waits has a deadline: `call.timeout`, else the
    // builder's agent_timeout (30 s). When it passes the call throws
    // timed_out_error naming the call, the peer and what it was waiting for;
    // when `call.stop` is stopped first it throws operation_cancelled.
    // Either way the connection stays up, and what the peer does later is
    // taken care of (a late grant is released, a late region goes to the
    // next receive). Agent messages are flow-controlled: a peer whose agent
    // stops reading (a stopped process) makes calls wait for room, within
    // their deadline, and never breaks the connection.

    /// Asks the peer's agent for `size` bytes of its memory with `access`,
    /// for `lease` (0 = the peer's default; it may shorten it). The peer
    /// allocates, zeroes and registers the region; dropping the returned
    /// remote_mr tells the peer to free it. The grant's access is `access`
    /// narrowed to what the peer allows (agent_limits::allowed_access,
    /// builder::remote_access), as for send_local_mr: remote_mr::access()
    /// says what was granted. Throws std::system_error if the peer refuses
    /// (over one of its agent_limits, or none of `access` allowed:
    /// permission_denied; the message says which); the connection stays up.
    task<remote_mr> request_remote_mr(std::size_t size, std::size_t alignment = 64,
                                      std::chrono::milliseconds lease = {},
                                      access_flags access = access_flags::remote_read | access_flags::remote_write,
                                      agent_call call = {});
    /// Grants the peer `access` on `region` (which stays alive until the
    /// grant ends) for `lease`; the peer gets it from receive_remote_mr.
    task<void> send_local_mr(local_slice region, std::chrono::milliseconds lease = {},
                             access_flags access = access_flags::remote_read | access_flags::remote_write,
                             agent_call call = {});
    /// The next region the peer granted with send_local_mr.
    task<remote_mr> receive_remote_mr(agent_call call = {});
    /// Hands a region the peer owns back to it (e.g. after writing into it);
    /// the peer gets it from receive_local_mr. A region whose grant the
    /// owner already ended throws std::system_error (timed_out, "lease
    /// expired"); one that times out waiting to be sent is released instead.
    task<void> send_remote_mr(remote_mr region, agent_call call = {});
    /// The next of this side's regions that the peer handed back, as a local
    /// region again (the peer's access to it has ended).
    task<local_mr> receive_local_mr(agent_call call = {});
    /// Ends every grant of memory overlapping `region` now: the peer is told,
    /// and its accesses fail with a remote access error. Returns how many.
    task<std::size_t> revoke_local_mr(local_slice region);

    /// Opens another queue pair to the same peer, sharing this connection's
    /// device, PD, CQs and event listener: for parallelism. Only on the connecting
    /// side (the peer's listener accepts it like any client); an accepted
    /// connection throws std::logic_error. It connects as the first did,
    /// with the same settings: with builder::agent(false), another plain
    /// connection carrying the same private data.
    task<connection> new_connection();

    /// True once the connection is shut down, closed, or broken by an error
    /// or by the peer going away. Event listener thread (or for a hint elsewhere).
    bool is_broken() const;
    /// Its rails, rail 0 first (builder::rails: one QP per device; one
    /// entry without rails): device, QP, whether each still works, and its
    /// counters. Any thread (it asks the event listener thread and waits).
    std::vector<rail_info> rails() const;

private:
    friend struct detail::connection_access;
    explicit connection(std::shared_ptr<detail::connection_state> state) noexcept;
    void release() noexcept;
    detail::connection_state& checked_state(const char* call) const;
    void check_sg_list(const char* call, std::span<const local_slice> sg_list, std::size_t limit) const;
    void check_remote_size(const char* call, std::size_t local, const remote_slice& remote) const;
    void check_atomic_target(const char* call, const remote_slice& remote) const;
    void check_remote_access(const char* call, const remote_slice& remote, access_flags needed) const;
    std::shared_ptr<detail::agent> agent_for(const char* call) const;

    std::shared_ptr<detail::connection_state> state_;
};

/// Two connections joined to each other on one device (loopback), both
/// served by the event listener `el`: for tests, examples and benchmarks.
/// Each gets an agent (a second, control QP pair) serving memory from
/// `pool` (default: a new pool on the pair's PD) within `limits`. The QPs
/// connect with `options`, whose reliability fields default to a
/// builder's (qp_defaults; builder.hpp explains them).
CORDMA_API std::pair<connection, connection> connect_loopback(std::shared_ptr<event_listener> el,
                                                   const qp_capacity& capacity = {},
                                                   qp_connect_options options = {},
                                                   std::shared_ptr<memory_pool> pool = nullptr,
                                                   agent_limits limits = {});

}  // namespace cordma
