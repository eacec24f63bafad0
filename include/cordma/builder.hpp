#pragma once
/// \file
/// The builder: every connection setting with a sensible default, then
/// `co_await builder.connect("host:port")` or `builder.listen("addr:port")`.
///
///     cordma::builder b;                        // first active device, event polling
///     cordma::connection c = co_await b.connect("10.0.0.2:7471");
///
///     auto l = b.listen("0.0.0.0:7471");
///     cordma::connection s = co_await l.accept();
///
/// Connections and listeners made from one builder share its device, event
/// listener, protection domain, completion queues and memory pool. The
/// builder may be copied: copies share them too. Settings changed after
/// the first connect or listen apply to later connections only, except the
/// device and the polling mode, which are fixed by then, and the pool's
/// chunk and initial sizes, which are refused by then.

#include <cordma/export.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <cordma/access.hpp>
#include <cordma/agent_limits.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/rails.hpp>
#include <cordma/task.hpp>

namespace cordma {

class listener;

namespace detail {
struct runtime;
struct builder_shared;
struct builder_access;
class shared_receive_state;
}  // namespace detail

class shared_receive_queue;

/// How two peers agree on their queue pairs.
enum class endpoint_exchange {
    /// librdmacm: addresses are IP addresses of RDMA netdevs, the port is an
    /// rdma_cm port (its own space, not TCP's).
    rdma_cm,
    /// A TCP connection (Asio) carries each side's QPN, PSN, GID and LID, and
    /// stays open to tell each side when the other goes away.
    tcp,
};

/// Every connection setting. Each applies on both transports, to the queue
/// pair of the side that set it (over rdma_cm too: cordma drives its QPs'
/// state transitions itself), or connect/listen refuses it with an error
/// naming the setting and the transport (tests/settings_test.cpp observes
/// each with ibv_query_qp on both ends).
struct CORDMA_API connection_settings {
    /// Device name ("" = the first device with an active port).
    std::string device;
    /// Port on the device (0 = the first active one; over rdma_cm, the port
    /// the address lives on, and any other is refused).
    std::uint8_t port = 0;
    /// GID index (-1 = the RoCE v2 GID of the local address: IPv4-mapped for
    /// IPv4). An explicit index must exist, be RoCE v2 and match the address
    /// family; the error lists the usable ones.
    int gid_index = -1;
    /// Initial entries of the shared completion queues; they grow as
    /// connections are added, and past the device's max_cqe another is made.
    int cq_size = 1024;
    /// Queue depths, scatter/gather entries and inline size of each
    /// connection's queue pair (builder::send_queue_depth,
    /// recv_queue_depth, max_sge, max_inline_data).
    qp_capacity capacity{};
    /// Path MTU cap; both sides use the smaller of their caps (and of the
    /// ports' active MTUs). Over rdma_cm without the agent (with_agent =
    /// false) there is no hello to agree on one: each side caps its own QP, under the path's
    /// MTU, and since an RC connection needs one MTU at both ends (the
    /// middle packets of a message are exactly one MTU long), set the same
    /// cap on both sides, or leave it to the path.
    ibv_mtu path_mtu = IBV_MTU_4096;
    // The reliability defaults below are cordma's for every queue pair, on
    // every path (rdma_cm, the TCP exchange, connect_loopback): their
    // numbers are held once, in queue_pair.hpp's qp_defaults.

    /// Local ACK timeout code: 4.096 us * 2^timeout (default 14: about
    /// 67 ms).
    std::uint8_t timeout = qp_defaults::timeout;
    /// Retransmissions before a work request fails with a retry error
    /// (IBV_WC_RETRY_EXC_ERR, "the peer stopped acknowledging"). A peer
    /// that stops answering (its link down, its host off) is found after
    /// about (retry_count + 1) * 4.096 us * 2^timeout: 7 * 67 ms = 470 ms
    /// with the defaults (the IB spec lets a device's timer run up to 4x
    /// long). Default 6, not 7: rxe, and some devices, retry forever at 7.
    std::uint8_t retry_count = qp_defaults::retry_count;
    /// Receiver-not-ready retries of this side's sends (default 6). Never
    /// 7 ("forever") by default for a connection: an rpc server, a stream,
    /// a group and a C API context take 7 unless it was set to another
    /// count, since their keepalives (or the rpc liveness read) decide when
    /// a peer is gone, and a live peer stopped for seconds is not.
    std::uint8_t rnr_retry = qp_defaults::rnr_retry;
    /// How long a peer waits before retrying this side when no receive was
    /// posted here, as the IB code: 0 = 655 ms (the longest), 1 = 0.01 ms,
    /// 12 = 0.64 ms, 20 = 10 ms, 31 = 491 ms. Default 0, what the kernel's
    /// connection manager gives an rdma_cm QP: with rnr_retry 6 a receiver
    /// may fall behind for about 4 s before the sender's work request fails
    /// (IBV_WC_RNR_RETRY_EXC_ERR), on every transport alike; a program that
    /// keeps its receives posted and wants a late one retried sooner sets
    /// 12, as cordma::rpc's server does.
    std::uint8_t min_rnr_timer = qp_defaults::min_rnr_timer;
    /// What peers may do to memory through these connections (the QP's
    /// access flags: a peer's RDMA WRITE fails if remote_write is missing,
    /// whatever a grant allows).
    access_flags remote_access = access_flags::remote_write | access_flags::remote_read | access_flags::remote_atomic;
    /// How the event listener waits for completions (see polling_mode).
    polling_mode polling = polling_mode::event;
    /// The connect deadline: a refused connect (nothing listening yet) is
    /// retried until it passes; the whole handshake, and each accept
    /// handshake, must finish within it.
    std::chrono::milliseconds connect_timeout{10'000};
    /// Clients a listener holds at once, as TCP's listen backlog: those
    /// whose handshake is under way (the listener answers every client as
    /// it arrives, whether or not an accept() is waiting) and those
    /// connected and waiting for accept(). Past it a client is refused,
    /// saying the backlog is full, and retries until its connect_timeout.
    /// 1 to 65535; listen() only.
    std::size_t backlog = 256;
    /// How peers exchange their queue pairs' endpoints.
    endpoint_exchange exchange = endpoint_exchange::rdma_cm;
    /// What peers may take from this side through the memory-region agent.
    /// Refused with with_agent = false, unless left at its default.
    cordma::agent_limits agent{};
    /// How long an agent call (request_remote_mr, receive_remote_mr, ...)
    /// may wait, unless the call's agent_call::timeout says otherwise.
    /// Refused with with_agent = false, unless left at its default.
    std::chrono::milliseconds agent_timeout{30'000};
    /// true: each connection is a data QP plus the agent's control QP,
    /// and both ends must be cordma with the agent on. false: a plain RC
    /// connection of one QP, which any verbs program can be the other end
    /// of (see builder::agent).
    bool with_agent = true;
    /// Sent to the peer while connecting, with with_agent = false only:
    /// in the connect request (connect: at most 56 bytes) or in the accept
    /// (listen: at most 196 bytes). The peer reads it with
    /// connection::peer_private_data.
    std::vector<std::byte> private_data;
    /// The size of each registration the builder's memory pool makes
    /// (builder::pool(), and what cordma takes from it: the agent's
    /// buffers, the regions it grants). Every registration pins its pages
    /// and counts against the locked-memory limit (RLIMIT_MEMLOCK), so a
    /// process under a small limit (a container's 8 MiB, or 64 KiB) needs
    /// small chunks; a region larger than a chunk gets a chunk of its own.
    /// At least 4096.
    std::size_t pool_chunk_size = 4 << 20;
    /// Bytes the pool registers as soon as the builder's shared pieces are
    /// made (the first connect, listen or pool()), in whole chunks, so the
    /// first allocations do not register; 0 (the default): as needed.
    std::size_t pool_initial_size = 0;
    /// The most bytes of registrations of the caller's own buffers kept
    /// for the next call that names the same memory (builder::
    /// local_registration, and what the modules register for their own
    /// reads into a caller's buffer: a stream read from register_size up,
    /// a large C receive or cordma_read). Never more than a quarter of the locked-memory limit
    /// (RLIMIT_MEMLOCK) when that is not unlimited; 0: nothing is kept.
    /// A kept registration is dropped when its memory leaves the address
    /// space (munmap, free, madvise), seen through the kernel's
    /// userfaultfd; where there is none, nothing is kept
    /// (builder::registration_stats() says why).
    std::size_t registration_cache_size = 256 << 20;
    /// Where to serve the process's metrics (metrics_endpoint.hpp:
    /// "unix:/path" or a loopback "HOST:PORT"), from the builder's first
    /// connect, listen or pool() until its connections and listeners are
    /// gone; builders naming the same address share one endpoint. Empty
    /// (the default): none (CORDMA_METRICS may still start one).
    std::string metrics_endpoint;
    /// The shared receive queue the data QPs receive through (builder::
    /// shared_receives); null: each connection has its own receives
    /// (capacity.max_recv_wr of them).
    std::shared_ptr<detail::shared_receive_state> shared_receives;
    /// Several rails (builder::rails): every device a connection uses,
    /// rail 0 first (the one its handshake and messages use; `device`
    /// must be empty or the same). Empty (the default): one rail,
    /// `device`.
    std::vector<std::string> rails;
    /// With several rails, a write or read of at least this many bytes is
    /// cut into one piece per rail, posted at once (builder::
    /// stripe_threshold); smaller ones, and every message and atomic, go
    /// on rail 0.
    std::size_t stripe_threshold = 256 << 10;
};

/// The most private data a connect request carries (rdma_cm over IB/RoCE:
/// the CM's REQ has 92 bytes, 36 of which are rdma_cm's own header).
inline constexpr std::size_t max_connect_private_data = 56;
/// The most private data an accept carries (the CM's REP).
inline constexpr std::size_t max_accept_private_data = 196;

/// Makes connections and listeners: holds a connection_settings, each
/// setter changing one field and returning *this so calls chain, and the
/// pieces its connections share (device, event listener, protection domain,
/// completion queues, memory pool), made on first use. Setters only store
/// (and check their own argument, throwing std::invalid_argument naming
/// the setting); a setting that cannot apply on the chosen transport is
/// refused by connect or listen, by name. Copies share the pieces. Not
/// thread-safe: set it up on one thread; connect and listen may then be
/// called from any.
class CORDMA_API builder {
public:
    /// Every setting at its default (connection_settings{}).
    builder();
    /// Starts from `settings`, checked when the first connection is made.
    explicit builder(connection_settings settings);

    /// The RDMA device by name ("rxe0", "mlx5_0"); "" (the default): the
    /// first with an ACTIVE port. Fixed once the shared pieces exist.
    builder& device(std::string name);
    /// The device port (1-based; 0, the default: the first ACTIVE one, or
    /// over rdma_cm the one the address lives on).
    builder& port(std::uint8_t port);
    /// One connection over several devices ("rails"; docs/rails.md): 2 to
    /// max_rails distinct device names, rail 0 first. Rail 0 is the
    /// builder's device (device() must be unset or the same); each
    /// connection gets a queue pair on every rail, joined in one
    /// handshake, and its large writes and reads are striped over them
    /// (stripe_threshold): an operation started while a striped one runs
    /// may reach the peer before the striped one's pieces on other rails,
    /// so await it before the message that announces it
    /// (docs/rails.md). Both peers must name as many rails. For now
    /// over the TCP endpoint exchange only (connect and listen refuse
    /// rdma_cm by name), without the agent's grants on rails 1.. and
    /// without shared_receives. Fixed once the shared pieces exist.
    builder& rails(std::vector<std::string> devices);
    /// With rails: writes and reads of at least `bytes` (at least 4096)
    /// are striped over every rail (default 256 KiB).
    builder& stripe_threshold(std::size_t bytes);
    /// The GID index (-1, the default: the RoCE v2 GID of the local
    /// address); checked at connect and listen, whose error lists the
    /// usable indices and their types.
    builder& gid_index(int index);
    /// Initial entries of the shared completion queues (at least 1). They
    /// grow as connections are added, up to the device's max_cqe; past that
    /// the builder makes another CQ (of at least this size), so the number
    /// of connections is bounded by memory, not by one CQ.
    builder& cq_size(int entries);
    /// Work requests each connection can have outstanding on its send
    /// queue (at least 1): sends, writes, reads and atomics in flight.
    builder& send_queue_depth(std::uint32_t depth);
    /// Receives each connection keeps posted (at least 1); refused with
    /// shared_receives, whose queue posts them instead.
    builder& recv_queue_depth(std::uint32_t depth);
    /// Scatter/gather entries per work request, send and receive (1 to
    /// cordma's maximum; std::invalid_argument names the range).
    builder& max_sge(std::uint32_t sges);
    /// Bytes a send or write may carry inline in its work request (the
    /// device may round up or refuse; connect says which).
    builder& max_inline_data(std::uint32_t bytes);
    /// Path MTU cap (connection_settings::path_mtu explains how both sides
    /// agree).
    builder& path_mtu(ibv_mtu mtu);
    /// Local ACK timeout code, 0..31: 4.096 us * 2^code per try
    /// (connection_settings::timeout).
    builder& timeout(std::uint8_t code);
    /// Transport retries, 0..7, before an operation fails with
    /// IBV_WC_RETRY_EXC_ERR (connection_settings::retry_count gives the
    /// time that takes).
    builder& retry_count(std::uint8_t count);
    /// Receiver-not-ready retries of this side's sends, 0..7 (7: forever).
    builder& rnr_retry(std::uint8_t count);
    /// How long a peer waits before retrying a send this side had no
    /// receive posted for, as the IB code 0..31.
    builder& min_rnr_timer(std::uint8_t code);
    /// What peers may do to memory through these connections' queue pairs
    /// (remote write, read, atomic); a grant never gives more.
    builder& remote_access(access_flags access);
    /// How the event listener waits for completions (polling_mode).
    /// Fixed once the shared pieces exist.
    builder& polling(polling_mode mode);
    /// The connect deadline (positive): refused connects are retried until
    /// it passes, and each handshake must finish within it.
    builder& connect_timeout(std::chrono::milliseconds limit);
    /// Clients a listener made from this builder holds at once
    /// (connection_settings::backlog; 1 to 65535).
    builder& backlog(std::size_t clients);
    /// How peers exchange their queue pairs' endpoints: rdma_cm (the
    /// default) or a TCP connection.
    builder& exchange(endpoint_exchange how);
    /// What peers may take from this side through the agent (region size,
    /// total bytes, region count, access); refused with agent(false).
    builder& agent_limits(const cordma::agent_limits& limits);
    /// The default deadline of agent calls on this builder's connections
    /// (positive; agent_call::forever for none).
    builder& agent_timeout(std::chrono::milliseconds limit);

    /// With or without the memory-region agent (default: with).
    ///
    /// agent(false) makes plain RC connections, to talk to programs that
    /// are not cordma (a librdmacm server or client, `ib_send_bw -R`, any C
    /// program): over rdma_cm, `connect` and `accept` set up one QP and
    /// send builder::private_data, nothing of cordma's own; the path MTU is
    /// what rdma_cm's path gives (rdma_init_qp_attr), capped by
    /// builder::path_mtu on this side's QP only (the peer must use the same
    /// MTU: a plain peer takes the path's). Over the TCP exchange, both ends must be cordma
    /// with agent(false): one QP's endpoint and the private data cross the
    /// socket (docs/wire-formats.md). Every other setting applies as with
    /// the agent. On such a connection the agent's calls throw
    /// std::logic_error, connection::peer_private_data has what the peer
    /// sent, and new_connection opens another plain connection.
    ///
    /// Both ends must agree: a listener with the agent refuses (and logs)
    /// a client whose connect request has no cordma hello, and a listener
    /// without it refuses a cordma client that has one; the cordma client
    /// then fails at once with std::errc::protocol_not_supported, naming
    /// the setting. A client with the agent that reaches a plain server
    /// fails the same way as soon as the server accepts.
    builder& agent(bool enabled);

    /// The private data to send while connecting (the default: none). Only
    /// with agent(false): connect and listen refuse it with the agent,
    /// whose handshake fills the private data itself. At most
    /// max_accept_private_data (196) bytes, and connect refuses more than
    /// max_connect_private_data (56), what a connect request can carry.
    /// Throws std::invalid_argument for more than 196 bytes.
    builder& private_data(std::span<const std::byte> bytes);
    /// The same, from the bytes of a string (no terminating zero).
    builder& private_data(std::string_view bytes);
    /// The data QP of every connection made from now on (connect, accept,
    /// new_connection; rdma_cm and TCP exchange alike) receives through
    /// `queue` (made from this builder) instead of its own receive queue;
    /// see shared_receive_queue.hpp. An empty queue goes back to own
    /// receives. Refused with recv_queue_depth (which would do nothing).
    builder& shared_receives(const shared_receive_queue& queue);
    /// The size of each registration of the builder's memory pool
    /// (connection_settings::pool_chunk_size; default 4 MiB): ask for less
    /// under a small locked-memory limit. Throws std::invalid_argument below
    /// 4096, and std::logic_error once the pool exists (after the first
    /// connect, listen or pool()), when it could no longer apply.
    builder& pool_chunk_size(std::size_t bytes);
    /// Serves the process's metrics at `where` (connection_settings::
    /// metrics_endpoint; metrics_endpoint.hpp) while this builder's pieces
    /// live. The address is checked when they are made (the first connect,
    /// listen or pool()), which throw as metrics_endpoint's constructor
    /// does; std::logic_error once they exist.
    builder& metrics_endpoint(std::string where);
    /// How much the pool registers up front (connection_settings::
    /// pool_initial_size; default 0, as needed). Throws std::logic_error
    /// once the pool exists.
    builder& pool_initial_size(std::size_t bytes);
    /// The most bytes of registrations kept for reuse (connection_settings::
    /// registration_cache_size; default 256 MiB; 0: none). Throws
    /// std::logic_error once the builder's shared pieces exist (after the
    /// first connect, listen, pool() or local_registration()).
    builder& registration_cache_size(std::size_t bytes);

    /// `buffer` registered for this side's own work requests: the target
    /// of a connection's read or recv, or the source of its write or send
    /// (local access: no peer gets a key to it, so not for a stream's or
    /// rpc's zero-copy write, whose peer reads the source). A registration kept from an earlier call
    /// that covers the buffer is reused, so registering the same buffer
    /// again costs a lookup, not an ibv_reg_mr; it is dropped when its
    /// memory is unmapped or freed (see connection_settings::
    /// registration_cache_size). The caller keeps the memory valid while
    /// the slice, its copies or an operation naming them live. Throws
    /// std::invalid_argument for an empty buffer, verbs_error as
    /// register_local_mr does.
    local_slice local_registration(std::span<std::byte> buffer);
    /// What the cache behind local_registration has done (hits, misses,
    /// bytes kept; why it keeps nothing, if it does not).
    registration_cache_stats registration_stats();

    /// Every setting as it stands now.
    const connection_settings& settings() const noexcept { return settings_; }

    /// Connects to a listener at `address` ("host:port"). The address is
    /// parsed and resolved (and the device opened) in the call itself, so
    /// those errors throw at once; the handshake starts when awaited. The
    /// coroutine resumes on the event listener thread.
    ///
    /// Throws, at the call: std::invalid_argument for an address that does
    /// not parse or a setting that cannot apply (naming it);
    /// std::system_error with cordma::errc::host_not_found for a host that
    /// does not resolve; verbs_error with cordma::errc::no_device when
    /// there is no RDMA device, or not the one named (listing those there
    /// are, and how to make one). When awaited: connect_error, whose code()
    /// is std::errc::connection_refused (still refused when connect_timeout
    /// runs out), std::errc::timed_out (no answer within it),
    /// std::errc::host_unreachable (the message says which netdev the route
    /// leaves through and whether an RDMA device is on it),
    /// std::errc::protocol_not_supported (the peer does not match
    /// builder::agent) or std::errc::connection_aborted; verbs_error with
    /// cordma::errc::memlock_limit when registering the connection's
    /// buffers passes the locked-memory limit.
    task<connection> connect(std::string address);

    /// Listens on `address` ("addr:port"; an empty addr or 0.0.0.0 for every
    /// address of the device). Binds at once: throws if the address is bad
    /// or in use.
    listener listen(std::string_view address);

    /// The event listener thread this builder's connections complete on,
    /// started on first use (opening the device; verbs_error with
    /// cordma::errc::no_device if there is none).
    std::shared_ptr<cordma::event_listener> event_listener();
    /// What this builder's connections (and its listeners' accepted ones)
    /// counted, read now (metrics.hpp): every live queue pair's counters,
    /// and the totals of those closed. Any thread. Empty before the first
    /// connection or listen (opens nothing).
    metrics_snapshot metrics() const;
    /// Starts the latency histograms of metrics() afresh
    /// (event_listener::reset_latency): what completes from now on. Any
    /// thread; nothing to do before the first connection or listen.
    void reset_latency();
    /// This builder's connections' pending operations, the `limit` oldest
    /// first (stuck_report.hpp; event_listener::stuck). Any thread but the
    /// event listener's, which answers within `wait` or is named busy.
    /// Empty before the first connection or listen.
    stuck_report stuck(std::size_t limit = 20, std::chrono::milliseconds wait = std::chrono::milliseconds(1000)) const;
    /// The memory pool shared by this builder's connections (registered
    /// with every access right), made on first use.
    std::shared_ptr<memory_pool> pool();
    /// The protection domain of this builder's connections and pool, made
    /// on first use.
    std::shared_ptr<protection_domain> pd();

private:
    friend class listener;
    friend struct detail::builder_access;
    std::shared_ptr<detail::runtime> runtime();

    friend class shared_receive_queue;
    connection_settings settings_;
    std::shared_ptr<detail::builder_shared> shared_;
};

}  // namespace cordma
