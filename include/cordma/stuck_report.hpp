#pragma once
/// \file
/// What is waiting, and since when: every pending operation of a program's
/// connections with its age and its stage, the oldest first, asked for
/// while the program runs (event_listener::stuck, builder::stuck,
/// process_stuck, the metrics endpoint's /stuck page, CORDMA_DUMP_ON).
///
/// ```
/// cordma::stuck_report r = builder.stuck();
/// std::fputs(cordma::to_text(r).c_str(), stderr);
/// // 120 operations pending; the oldest:
/// //   2,310 ms  send 64 B to 10.0.0.2:7471 (qp 17): posted, waiting for its completion
/// //   1,020 ms  rpc call #9 to method 3 (slow), 64 B, from 10.0.0.3:40112: running its handler,
/// //             trace 4bf92f3577b34da6a3ce929d0e0e4736
/// //     812 ms  request_remote_mr of 4,096 B, to 10.0.0.2:7471 (qp 19, agent): waiting for the peer's answer
/// ```
///
/// Ages come from the coarse clock each event listener reads once per turn
/// of its loop (CLOCK_MONOTONIC_COARSE: a few milliseconds' resolution, no
/// clock read per operation): an operation's age is how long ago the turn
/// that posted it, or made it wait, began.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cordma/export.hpp>
#include <cordma/metrics.hpp>
#include <cordma/trace.hpp>

namespace cordma {

/// Where a pending operation is.
enum class pending_stage : std::uint8_t {
    /// Not posted yet: the send queue is full (waiting, FIFO, for an entry).
    send_queue_full,
    /// Not posted yet: the receive queue is full.
    receive_queue_full,
    /// Posted to the device, waiting for its completion (the peer's
    /// acknowledgement, its answer to a read or an atomic, or a receive of
    /// its for a send: a peer that posts none keeps a send here).
    posted,
    /// A receive posted, waiting for the peer's message.
    receive_posted,
    /// An rpc call (rpc::client) waiting for its answer, or for a credit
    /// to send its request.
    rpc_call,
    /// A group's collective waiting for the other ranks' part.
    collective,
    /// A stream read waiting for the peer's data.
    stream_read,
    /// A stream write waiting for the reader: room in its window, or its
    /// read of a large (zero-copy) write.
    stream_write,
    /// An rpc call on the server (rpc::server): its request being read,
    /// its handler running, or its answer being sent.
    rpc_handler,
    /// A call of the connection's memory-region agent (request_remote_mr,
    /// send_local_mr, receive_remote_mr, send_remote_mr,
    /// receive_local_mr): waiting for room in the agents' window, for the
    /// peer's answer, or for the peer to grant or hand back a region.
    agent_call,
};

/// "waiting for a send-queue entry", "posted, waiting for its completion", ...
CORDMA_API const char* describe(pending_stage stage) noexcept;

/// One operation waiting.
struct pending_operation {
    /// The peer's address, as metrics name it ("10.0.0.2:7471").
    std::string peer;
    /// Its queue pair's number.
    std::uint32_t qp_num = 0;
    /// Its queue pair's role: "data", or "agent" (the agent's control QP).
    std::string role;
    /// What it is (a send, a read, a recv, ...).
    operation_kind kind = operation_kind::send;
    /// Where it waits.
    pending_stage stage = pending_stage::posted;
    /// How long it has waited (at the coarse clock's resolution).
    std::chrono::milliseconds age{0};
    /// The bytes it moves (its local buffers; 8 for an atomic; a
    /// module's call: its request or buffer).
    std::uint64_t bytes = 0;
    /// A module's operation or an agent call (every stage but the four
    /// above): what it is, e.g. "rpc call #17 to method 3 (slow)",
    /// "request_remote_mr, waiting for the peer's answer",
    /// "all_reduce #5 on rank 1 of 4"; empty for a connection's
    /// operation, which `kind` names (a module's sets no kind: ignore it).
    std::string what;
    /// An rpc call's trace id, on either end (call_options::trace; empty if
    /// none).
    trace_id trace{};
};

/// The pending operations of one or more event listeners, read at once.
struct stuck_report {
    /// The oldest ones, oldest first (at most as many as asked for).
    std::vector<pending_operation> oldest;
    /// Every pending operation seen.
    std::uint64_t pending = 0;
    /// Event listeners whose thread did not answer within the time asked
    /// (1 s by default): it is busy, e.g. a handler that blocks it. Each
    /// named by its device.
    std::vector<std::string> unanswered;
};

/// The report as lines of text (the log's and the /stuck page's form).
CORDMA_API std::string to_text(const stuck_report& report);

/// Every event listener's in the process, merged (each asked on its own
/// thread, at most `wait` each). Any thread but an event listener's.
CORDMA_API stuck_report process_stuck(std::size_t limit = 20,
                                      std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

}  // namespace cordma
