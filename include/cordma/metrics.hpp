#pragma once
/// \file
/// What every connection did: exact counters, readable from any thread
/// while the connections run, and their renderings for operators
/// (Prometheus' text format, JSON).
///
/// Each connection counts on the thread that runs its event listener's
/// loop, in memory that thread already touches (no lock, no atomic
/// read-modify-write: one writer at a time, readers see each counter whole).
/// A snapshot reads every counter once: each is exact, and the set is as of
/// a moment during the read (operations completing meanwhile may show as
/// posted and not yet completed).
///
/// ```
/// cordma::metrics_snapshot m = builder.metrics();
/// std::uint64_t writes = m.total()[cordma::operation_kind::write].completed;
/// std::string page = cordma::to_prometheus(m);  // for a scrape
/// ```

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cordma/device_counters.hpp>
#include <cordma/export.hpp>
#include <cordma/latency_histogram.hpp>

namespace cordma {

/// The kinds of operation a connection counts (connection.hpp's calls).
enum class operation_kind : std::uint8_t {
    /// connection::send.
    send,
    /// connection::send_with_imm.
    send_with_imm,
    /// connection::write.
    write,
    /// connection::write_with_imm.
    write_with_imm,
    /// connection::read.
    read,
    /// connection::fetch_add.
    fetch_add,
    /// connection::compare_swap.
    compare_swap,
    /// connection::recv and recv_imm, and a receive_queue's receives.
    recv,
};
/// How many kinds there are (the size of connection_counters::operations).
inline constexpr std::size_t operation_kinds = 8;
/// "send", "send_with_imm", "write", ..., "recv": the name used in the
/// renderings.
CORDMA_API const char* name(operation_kind kind) noexcept;

/// The work completion statuses counted one by one (ibv_wc_status values
/// below this; a larger one is counted in the last).
inline constexpr std::size_t completion_statuses = 24;

/// "success", "loc_len_err", ..., "tm_rndv_incomplete": ibv_wc_status's
/// names in lower case without IBV_WC_, the label in the renderings.
CORDMA_API const char* completion_status_name(std::size_t status) noexcept;

/// Why a connection (a queue pair) ended: metrics_snapshot::disconnects.
enum class disconnect_cause : std::uint8_t {
    /// This side closed it: close(), shut_down(), its last handle dropped
    /// (a module closing its own connection counts here too).
    closed_here,
    /// The peer did: its rdma_cm disconnect, or its TCP exchange socket
    /// closing (its process ended, or it closed).
    peer_closed,
    /// A work completion failed: the peer stopped acknowledging (its host
    /// or link gone), a remote access error (a bad key), a receiver that
    /// never made room, ...: completions[status] says which.
    failed_completion,
    /// Anything else: the agent's control channel failing, a module's
    /// liveness check giving up on the peer, a post the device refused.
    other,
};
/// How many causes there are (the size of metrics_snapshot::disconnects).
inline constexpr std::size_t disconnect_causes = 4;
/// "closed_here", "peer_closed", "failed_completion", "other": the label
/// in the renderings.
CORDMA_API const char* name(disconnect_cause cause) noexcept;

/// One kind of operation on one connection.
struct operation_counters {
    /// Work requests posted for it (for recv: receives posted, by recv or
    /// by a receive_queue).
    std::uint64_t posted = 0;
    /// Operations that finished successfully (for recv: messages delivered,
    /// to a recv or a receive_queue).
    std::uint64_t completed = 0;
    /// Operations that finished with an error: a failed or flushed
    /// completion, a cancellation, or a refusal before posting.
    std::uint64_t failed = 0;
    /// Bytes: of the requests posted (send, write, read; 8 for an atomic),
    /// or of the messages delivered (recv).
    std::uint64_t bytes = 0;
};

/// Everything one connection (one queue pair) counted, or a sum of them.
struct CORDMA_API connection_counters {
    /// By operation kind, indexed by operation_kind.
    std::array<operation_counters, operation_kinds> operations{};
    /// Work completions reaped from the device for this queue pair, by
    /// ibv_wc_status (index 0: IBV_WC_SUCCESS). Unsignalled requests
    /// produce none (a later completion retires them).
    std::array<std::uint64_t, completion_statuses> completions{};
    /// Send-queue work requests posted.
    std::uint64_t work_requests = 0;
    /// ibv_post_send calls that posted them: fewer than the requests when
    /// a drain pass chained them.
    std::uint64_t doorbells = 0;
    /// Requests that asked for a completion (selective signalling).
    std::uint64_t signalled = 0;
    /// Operations that found the send queue full and waited for room.
    std::uint64_t send_waits = 0;
    /// Receives that found the receive queue full and waited for room.
    std::uint64_t recv_waits = 0;

    /// The counters of one kind.
    const operation_counters& operator[](operation_kind kind) const noexcept {
        return operations[static_cast<std::size_t>(kind)];
    }
    /// Every work completion reaped (the sum over statuses).
    std::uint64_t completions_reaped() const noexcept;
    /// Adds `other`'s counts to these (totals, sums by host).
    connection_counters& operator+=(const connection_counters& other) noexcept;
};

/// One live connection's queue pair, as counted.
struct connection_metrics {
    /// The peer's address ("10.0.0.2:7471", as in error messages).
    std::string peer;
    /// The queue pair's number (a connection with the agent has two: the
    /// data QP and the agent's control QP, role "agent").
    std::uint32_t qp_num = 0;
    /// "data", or "agent" for the agent's control queue pair.
    std::string role;
    /// Whether it broke (a failed completion, the peer gone, closed).
    bool broken = false;
    /// Why it broke (the first failure), or empty.
    std::string broken_reason;
    /// The kind of that reason (when broken).
    disconnect_cause cause = disconnect_cause::other;
    /// What it counted.
    connection_counters counters;
};

/// What one connection's agent granted to its peer and received from it
/// (connection::agent_metrics()); the process's agents are summed on the
/// metrics endpoint's page (cordma_agent_*).
struct agent_counters {
    /// Regions granted to the peer: asked for (its request_remote_mr) or
    /// sent (send_local_mr, send_remote_mr handing one back).
    std::uint64_t grants = 0;
    /// The peer's requests refused (over a limit or a quota).
    std::uint64_t denied = 0;
    /// Grants the peer let go (release, or handed back).
    std::uint64_t released = 0;
    /// Grants whose lease ran out.
    std::uint64_t expired = 0;
    /// Grants revoked here (connection::revoke_local_mr).
    std::uint64_t revoked = 0;
    /// Grants ended with the connection.
    std::uint64_t closed = 0;
    /// Grants send_local_mr could not send.
    std::uint64_t unsent = 0;
    /// Regions the peer granted this side.
    std::uint64_t received = 0;
    /// Of those, revoked by the peer.
    std::uint64_t revoked_by_peer = 0;
    /// Regions granted to the peer now.
    std::uint64_t granted_regions = 0;
    /// Their bytes: registered and pinned here for the peer now.
    std::uint64_t granted_bytes = 0;
};

/// One shared_receive_queue (shared_receive_queue.hpp: an rpc server's, or
/// the program's own), as counted. Its receives are counted here, not on
/// the connections that send through it (a completion names only a QP
/// number: finding its connection would cost a lookup per message), and in
/// metrics_snapshot::total() with every connection's.
struct shared_receive_metrics {
    /// The device it is on ("rxe0").
    std::string device;
    /// 1 for the first queue the process made, then 2, 3, ...: its label.
    std::uint64_t id = 0;
    /// Receives it holds (all posted while no message is held).
    std::uint64_t size = 0;
    /// Bytes each receive takes.
    std::uint64_t buffer_size = 0;
    /// Connections receiving through it now.
    std::uint64_t connections = 0;
    /// Receives posted now, waiting for a message (size() minus the
    /// messages arrived and not yet released).
    std::uint64_t ready = 0;
    /// The fewest posted since it opened, as the event listener saw them
    /// (it counts a receive used when it reaps the completion, and a
    /// message's buffer is posted again when released): 0 means the queue
    /// ran dry at least once. Not proof of the opposite: the device may use
    /// up its receives between two passes of the loop, and then senders
    /// wait in receiver-not-ready retries unseen here (the senders' devices
    /// count those: device_counters, rcvd_rnr_err).
    std::uint64_t fewest_ready = 0;
    /// What it counted: operations[recv] (posted: receives posted, the
    /// first size() included; completed and bytes: messages delivered;
    /// failed: receives that completed with an error, or with a message
    /// that arrived after the queue's handle was destroyed and was
    /// dropped) and completions by status. The other counters stay 0.
    connection_counters counters;
};

/// The connections of one event listener (one builder's or listener's),
/// read at once.
struct CORDMA_API metrics_snapshot {
    /// The live ones, oldest first.
    std::vector<connection_metrics> connections;
    /// The live shared receive queues, oldest first.
    std::vector<shared_receive_metrics> shared_receive_queues;
    /// What the connections and shared receive queues that have gone
    /// counted, summed.
    connection_counters closed;
    /// Queue pairs counted since the event listener started.
    std::uint64_t opened = 0;
    /// Those of them destroyed since (their counts are in `closed`).
    std::uint64_t gone = 0;
    /// Queue pairs whose connection ended, by disconnect_cause (each
    /// counted once, when it first broke; live and gone ones alike).
    std::array<std::uint64_t, disconnect_causes> disconnects{};
    /// How long operations took, by operation_kind: from the turn of the
    /// event listener's loop that started one (posted it, or queued it for
    /// a send-queue entry) to the turn that saw it complete, for those that
    /// succeeded; so within a turn's length of the time the caller awaited
    /// it. Receives are not timed (they wait for the peer to send: their
    /// histogram stays empty). Every connection the listener served, gone
    /// ones included, since it started or its last reset_latency().
    std::array<latency_histogram, operation_kinds> latency{};
    /// The device's own counters (device_counters.hpp: retransmissions,
    /// sequence errors, receiver-not-ready NAKs, packets), read from sysfs
    /// as the snapshot is taken: every port of the event listener's device
    /// (for process_metrics(), of every live listener's device, each once).
    /// A port whose counters cannot be read is left out.
    std::vector<device_counters> devices;

    /// The latency histogram of one kind.
    const latency_histogram& latency_of(operation_kind kind) const noexcept {
        return latency[static_cast<std::size_t>(kind)];
    }
    /// closed plus every live connection's and shared receive queue's.
    connection_counters total() const;
    /// The live connections' counters summed by peer host (the address
    /// without its port; an IPv6 one in brackets, as the agent's per-host
    /// limits name it), hosts in order of first appearance.
    std::vector<std::pair<std::string, connection_counters>> by_peer_host() const;
};

/// Every event listener's connections in the process (every builder's,
/// listener's and module's), read at once: the live ones, and in `closed`
/// what those gone counted, the event listeners gone included. What the
/// metrics endpoint serves (metrics_endpoint.hpp). Any thread.
CORDMA_API metrics_snapshot process_metrics();

/// What to_prometheus renders beside the totals.
struct prometheus_options {
    /// Series per peer host (label host).
    bool peer_hosts = true;
    /// Series per live queue pair (labels peer, qp, role): exact, but as
    /// many series as connections, which a server with thousands of
    /// clients may not want scraped.
    bool connections = false;
};

/// The snapshot in Prometheus' text exposition format (0.0.4, what a
/// Prometheus server scrapes; `promtool check metrics` accepts it): metric
/// names prefixed "cordma_", counters ending in "_total", every family with
/// its HELP and TYPE. Each live shared receive queue has its own series
/// (cordma_srq_*, labels device and srq: its id), and the devices' own
/// counters are cordma_device_events_total{device,port,counter}.
CORDMA_API std::string to_prometheus(const metrics_snapshot& snapshot, const prometheus_options& options = {});
/// The snapshot as one JSON object (totals, closed, by_peer_host,
/// connections, shared_receive_queues and devices, every counter by name;
/// zero counts included).
CORDMA_API std::string to_json(const metrics_snapshot& snapshot);

}  // namespace cordma
