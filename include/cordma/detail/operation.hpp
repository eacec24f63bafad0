#pragma once
/// The machinery under every awaitable operation: the state an operation
/// keeps in its coroutine frame, and the per-connection work slots its work
/// requests point to.

#include <cordma/export.hpp>
#include <array>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>

#include <infiniband/verbs.h>

#include <cordma/detail/completion_target.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/metrics.hpp>
#include <cordma/remote_slice.hpp>

namespace cordma::detail {

class connection_state;
struct operation_base;

/// Scatter/gather entries one operation may carry (checked against the QP).
inline constexpr std::size_t max_sges = 4;

/// The kinds of operation (metrics.hpp's operation_kind: what metrics
/// count them by is what the engine posts).
using op_kind = cordma::operation_kind;

const char* to_string(op_kind kind) noexcept;
constexpr bool is_receive(op_kind kind) noexcept { return kind == op_kind::recv; }

class receive_queue_state;

/// A per-connection work request slot (lib/engine/work_slot.hpp): what a
/// posted operation's wr_id points to.
struct work_slot;

/// The part of an operation's awaiter the connection drives. Lives in the
/// coroutine frame; allocates nothing.
struct CORDMA_API operation_base {
    connection_state* connection = nullptr;
    op_kind kind = op_kind::send;
    std::uint8_t sge_count = 0;
    std::array<local_slice, max_sges> local;
    remote_slice remote{};
    std::uint32_t imm = 0;  // host order
    std::uint64_t compare_add = 0;
    std::uint64_t swap = 0;

    std::coroutine_handle<> continuation;
    /// Called instead of resuming `continuation` when set: for an
    /// operation no coroutine awaits (a link's frame, sent and forgotten:
    /// no coroutine frame per frame). Nothing of `op` is touched after it.
    void (*on_done)(operation_base* op) noexcept = nullptr;
    work_slot* slot = nullptr;
    operation_base* next_waiting = nullptr;
    operation_base* prev_waiting = nullptr;
    bool waiting = false;
    /// Pieces of it still running on the connection's rails (a striped
    /// write or read, builder::rails); 0 otherwise.
    std::uint8_t pieces_left = 0;
    std::uint64_t ticket = 0;
    // When it began to wait for a queue entry (the loop turn's coarse
    // clock, ms): its age in a stuck report.
    std::uint64_t waiting_since_ms = 0;
    // When it began to wait for a queue entry, in the loop turn's ticks
    // (0 if it never waited): where its latency starts.
    std::uint64_t queued_tick = 0;

    // Outcome.
    bool done = false;
    ibv_wc_status status = IBV_WC_SUCCESS;
    std::uint32_t vendor_error = 0;
    std::uint32_t byte_len = 0;
    bool has_imm = false;
    std::uint32_t received_imm = 0;
    std::uint64_t old_value = 0;
    std::exception_ptr error;

    /// Throws the operation's error, if it failed.
    void rethrow_if_failed() const;
    /// The operation has its outcome: resumes its coroutine, or calls
    /// on_done. The last thing its connection does with it.
    void wake() {
        if (on_done != nullptr)
            on_done(this);
        else
            continuation.resume();
    }
};

}  // namespace cordma::detail
