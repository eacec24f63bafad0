#pragma once
/// The connections (queue pairs) of one event listener, for a metrics
/// snapshot on any thread: each connection_state enters when made and
/// leaves when destroyed, leaving its counts in the closed totals. Locked
/// only then, when a connection breaks, and by a snapshot: never per
/// operation.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cordma/metrics.hpp>
#include <cordma/stuck_report.hpp>
#include "engine/latency_recorder.hpp"

namespace cordma::detail {

class connection_state;
class shared_receive_state;

/// A module's pending operations for a stuck report (an rpc client's calls,
/// a group's collective, a stream's read or write): `collect` appends them,
/// aged against now_ms, on the event listener's thread.
struct pending_source {
    void (*collect)(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);
    const void* self;
};

class connection_registry {
public:
    void add(const connection_state* state);
    /// Its final counts go into the closed totals.
    void remove(const connection_state* state) noexcept;
    /// `state` broke, for `why` (kept for the snapshot, and counted by
    /// `cause` the first time unless `counted` is false: a rail's queue
    /// pair failing is not the connection ending; any thread).
    void note_broken(const connection_state* state, const std::string& why, disconnect_cause cause,
                     bool counted = true);
    /// A shared receive queue of the listener's, from its construction to
    /// its destruction (any thread): listed in snapshots, its final counts
    /// then in the closed totals.
    void add_receive_queue(const shared_receive_state* queue);
    void remove_receive_queue(const shared_receive_state* queue) noexcept;
    metrics_snapshot snapshot() const;
    /// Every live connection's pending operations (stuck_report.hpp),
    /// aged against `now_ms`. The loop's thread (the connections' lists
    /// are its own; the lock keeps a connection being destroyed on another
    /// thread from going meanwhile).
    void collect_pending(std::uint64_t now_ms, std::vector<pending_operation>& out) const;
    /// The latency of each operation kind, recorded by every connection
    /// of the listener (its loop's thread).
    latency_recorder& latency(operation_kind kind) noexcept { return latency_[static_cast<std::size_t>(kind)]; }
    /// Snapshots from now on show the latencies recorded from now on.
    void reset_latency();
    /// A module's pending operations join (leave) the stuck reports
    /// (pending_source_registration does both).
    void add_source(pending_source source);
    void remove_source(const void* self) noexcept;

private:
    struct entry {
        const connection_state* state;
        bool broken = false;
        std::string reason;
        disconnect_cause cause = disconnect_cause::other;
    };
    mutable std::mutex mutex_;
    std::vector<entry> live_;  // oldest first
    std::vector<const shared_receive_state*> receive_queues_;  // oldest first
    std::vector<pending_source> sources_;
    connection_counters closed_;
    std::uint64_t opened_ = 0;
    std::uint64_t gone_ = 0;
    std::array<std::uint64_t, disconnect_causes> disconnects_{};
    std::array<latency_recorder, operation_kinds> latency_;
    // What the histograms held at the last reset_latency (made by the
    // first): taken out of every snapshot.
    std::unique_ptr<std::array<latency_histogram, operation_kinds>> latency_base_;
};

}  // namespace cordma::detail
