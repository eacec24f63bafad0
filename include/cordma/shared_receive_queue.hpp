#pragma once
/// \file
/// One set of posted receives that many connections receive through: a
/// shared receive queue (SRQ).
///
/// A server with a receive_queue per client needs buffers for every client
/// (N clients x depth x size); with an SRQ, every client's SENDs land in
/// one pool of receives, so memory follows the traffic, not the number of
/// clients:
///
///     cordma::builder b;
///     cordma::shared_receive_queue srq(b, 256, 4096);  // 256 receives of 4 KiB, on b's device
///     b.shared_receives(srq);                          // b's connections receive through it
///     auto listener = b.listen("0.0.0.0:7471");
///     ... accept connections, keep them by conn.qp()->qp_num() ...
///     for (;;) {
///         cordma::received_message m = co_await srq.next();  // from any of them
///         reply_to(m.qp_num(), m.bytes());
///     }                                                    // m's buffer is posted again here
///
/// Contract:
/// - Posting: the constructor posts every receive before it returns; a
///   message's buffer is posted again when its received_message is
///   released, so at most size() messages can be held at once. While all
///   are held, senders wait in receiver-not-ready retries (builder::
///   rnr_retry); give the queue enough buffers, or bound what each peer may
///   send (credits, as cordma::rpc does).
/// - Attaching: builder::shared_receives(srq) makes the data QP of every
///   connection the builder (or a listener from it) makes afterwards
///   receive through the queue, on every connection path (rdma_cm, TCP
///   exchange, new_connection). The queue must be made from the same
///   builder (the same protection domain). Such a connection has no
///   receives of its own: connection::recv and a receive_queue on it throw
///   std::logic_error. The agent's control QP keeps its own receives.
/// - Order: next() yields messages in the order their completions arrive;
///   the messages of one connection in the order its peer sent them.
///   received_message::qp_num() says which connection sent each one.
/// - Ends: ended() reports each attached connection that broke (closed by
///   either side, failed, its peer gone), in order. Messages that arrived
///   from it before may still be waiting for next().
/// - Errors: a message longer than the buffers fails on the device and
///   breaks the connection that sent it (only that one); the buffer is
///   posted again. next() throws only when the queue is destroyed
///   (operation_cancelled), on a deadline (std::errc::timed_out) or on
///   cancellation; it never fails because a connection did.
/// - Threads: as receive_queue: next() resumes on the event listener
///   thread; nothing is allocated per message there.
/// - Lifetime: a move-only handle, like receive_queue. The SRQ itself
///   lives while the handle, a message, or an attached connection's QP
///   uses it. Destroying the handle makes pending next() and ended() calls
///   throw operation_cancelled; messages arriving afterwards are dropped
///   (their buffers are not posted again), and the builder refuses to make
///   new connections on it.
/// - Devices without SRQs (max_srq == 0): the constructor throws
///   std::system_error (std::errc::function_not_supported); supported()
///   says beforehand.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include <cordma/export.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task.hpp>

struct ibv_srq;

namespace cordma {

class builder;

namespace detail {
class shared_receive_state;
struct shared_receive_access;
}

/// A connection of a shared_receive_queue that broke: ended() reports it.
struct ended_connection {
    std::uint32_t qp_num = 0;  ///< its data QP (received_message::qp_num of its messages)
    std::string peer;          ///< whom it went to
    std::string why;           ///< why it broke
};

/// A shared receive queue: one pool of posted receives that many
/// connections' messages land in, yielded in arrival order (the contract is
/// at the top of this header). Move-only handle.
class CORDMA_API shared_receive_queue {
public:
    /// An empty handle: calls throw std::logic_error.
    shared_receive_queue() = default;
    /// Takes over `other`'s queue; `other` becomes an empty handle.
    shared_receive_queue(shared_receive_queue&&) noexcept = default;
    /// Lets go of this handle's queue (as the destructor does), then takes
    /// over `other`'s.
    shared_receive_queue& operator=(shared_receive_queue&& other) noexcept;
    shared_receive_queue(const shared_receive_queue&) = delete;
    shared_receive_queue& operator=(const shared_receive_queue&) = delete;
    ~shared_receive_queue();
    /// Creates an SRQ on `b`'s device and protection domain with `count`
    /// receives of `buffer_size` bytes each (one registration), and posts
    /// them. Throws std::invalid_argument for a count of 0 or above the
    /// device's max_srq_wr, or a buffer_size of 0 or over 4 GiB - 1;
    /// std::system_error(function_not_supported) on a device without SRQs.
    shared_receive_queue(builder& b, std::size_t count, std::size_t buffer_size);

    /// Whether `b`'s device has shared receive queues.
    static bool supported(builder& b);

    /// False for an empty (default-constructed or moved-from) handle.
    explicit operator bool() const noexcept { return state_ != nullptr; }

    /// The next message from any attached connection; waits until one
    /// arrives. Throws operation_cancelled if `token` is stopped first (no
    /// message is taken).
    receive_queue::next_operation next(std::stop_token token = {});
    /// As next(token), but throws std::system_error (std::errc::timed_out),
    /// taking no message, if none arrives within `timeout`.
    receive_queue::next_operation next(std::chrono::nanoseconds timeout, std::stop_token token = {});

    /// The next attached connection that broke (see the contract). Throws
    /// operation_cancelled if `token` is stopped first.
    task<ended_connection> ended(std::stop_token token = {});

    /// The peer of the attached connection whose data QP is `qp_num`
    /// ("" if none is attached with that number).
    std::string peer_of(std::uint32_t qp_num) const;
    /// Connections attached now.
    std::size_t connections() const;

    /// How many receives it keeps posted.
    std::size_t size() const;
    /// How large each receive's buffer is: the largest message it takes.
    std::size_t buffer_size() const;
    /// The verbs SRQ (what ibv_query_qp's init_attr.srq names for the data
    /// QP of every attached connection).
    ibv_srq* native_handle() const;

private:
    friend struct detail::shared_receive_access;
    void close() noexcept;
    const std::shared_ptr<detail::shared_receive_state>& checked(const char* call) const;
    std::shared_ptr<detail::shared_receive_state> state_;
};

}  // namespace cordma
