#pragma once
/// A work request slot: what a posted work request's wr_id points to.

#include <array>
#include <cstdint>

#include <infiniband/verbs.h>

#include <cordma/local_mr.hpp>
#include <cordma/detail/completion_target.hpp>
#include <cordma/detail/operation.hpp>

namespace cordma::detail {

class connection_state;
class receive_queue_state;

/// Slots are preallocated per connection, one per send- or receive-queue
/// entry, so holding one is holding a credit. A work request's wr_id points
/// to its slot, never into a coroutine frame: if the coroutine goes away
/// first, the slot is merely orphaned (op == nullptr), takes the operation's
/// buffers and keeps them alive until the completion or flush arrives.
/// While the operation lives, its own frame holds the buffers: a posted
/// operation costs no reference-count traffic beyond what its caller's
/// slices already did.
///
/// A receive slot whose operation was cancelled or abandoned after posting
/// stays an orphan in the receive queue: the message that lands in it is
/// handed to the next recv on the connection (an operation that adopts the
/// slot, or that later takes it from the kept messages), never dropped.
struct work_slot : completion_target {
    connection_state* owner = nullptr;
    operation_base* op = nullptr;
    work_slot* next_free = nullptr;
    /// Receive slots: the next one in posting order while posted, or in
    /// arrival order while kept (completed, nobody took the message yet).
    /// Send slots: the next one in posting order while posted (the send
    /// queue completes in that order, which selective signalling relies on).
    work_slot* next_in_line = nullptr;
    std::uint64_t ticket = 0;
    /// The loop turn's time (coarse, ms) when its operation was posted: its
    /// age in a stuck report.
    std::uint64_t posted_ms = 0;
    /// The loop turn's ticks when its operation began (posted, or queued
    /// for this slot): the start of its latency (latency_histogram.hpp).
    std::uint64_t posted_tick = 0;
    /// The buffers of an orphaned operation (or a receive_queue's, or a
    /// kept message's), alive until the completion arrives or the message
    /// is taken. Empty while the operation itself holds them.
    std::array<local_slice, max_sges> buffers;
    std::uint8_t buffer_count = 0;
    /// 8 registered bytes where an atomic's old value lands.
    std::uint64_t* atomic_result = nullptr;
    std::uint32_t atomic_lkey = 0;
    bool receive = false;
    /// Receive slots: `op` adopted this slot from a cancelled receive, so the
    /// message lands in `buffers` and is copied into op's own on completion.
    bool adopted = false;
    /// Receive slots owned by a receive_queue (lib/engine/receive_queue.cpp).
    receive_queue_state* queue = nullptr;
    /// A kept message (completed, not taken yet): what the completion said.
    std::uint32_t byte_len = 0;
    bool has_imm = false;
    std::uint32_t received_imm = 0;
    /// The QP the message arrived on (wc.qp_num).
    std::uint32_t source_qp = 0;
    /// Send slots: the work request, built in place (wr_id and sg_list are
    /// set once, when the slot is made; a post fills only what its opcode
    /// uses), so it can wait in the connection's chain until the drain pass
    /// ends and the chain goes out with one ibv_post_send.
    ibv_send_wr wr{};
    std::array<ibv_sge, max_sges> sges{};
};

}  // namespace cordma::detail
