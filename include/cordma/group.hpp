#pragma once
/// \file
/// A group: N processes, one per rank, joined by a full mesh of RC
/// connections (each with its agent), and collectives over it.
///
///     cordma::builder b;
///     cordma::group g = co_await cordma::group::form(b, cordma::group_options::from_environment());
///     cordma::local_mr buf = g.allocate(4096);
///     co_await g.broadcast(buf, 0);                 // rank 0's bytes, everywhere
///     co_await g.all_reduce<double>(buf, buf, cordma::reduce_op::sum);
///     co_await g.connection(1).write(...);           // any operation, to one rank
///
/// Forming: every rank listens on its endpoint, connects to every lower
/// rank and accepts every higher one, all at once (no ordering deadlock).
/// A refused connect (the peer is not up yet) is retried until
/// group_options::formation_timeout; if it runs out, form() throws
/// group_error naming the ranks that never came. Endpoints come from a
/// host list, from PMIx (mpirun, srun --mpi=pmix, PRRTE) or from a
/// torchrun-style environment: see group_options.
///
/// Collectives follow MPI's rules: every rank calls the same collectives in
/// the same order, with the same root and matching sizes, one at a time per
/// group. A mismatch (another collective, root or size) is detected and
/// fails the call on the ranks that see it, with group_error saying what
/// each side called; it is never silently corrupted.
///
/// Buffers are local_slices registered on the builder's protection domain
/// with local and remote access (g.allocate(), or the builder's pool):
/// messages up to group_options::eager_size travel in receives the group
/// keeps posted; larger ones are read by the receiver straight out of the
/// sender's buffer (RDMA READ), so nothing large is copied on either side.
/// Which algorithm each collective uses, by size and group size, is in
/// docs/group.md.
///
/// Point-to-point messages (MPI_Send / MPI_Recv): `co_await g.send(2,
/// buf, tag)` on one rank, `co_await g.recv(0, buf, tag)` (or
/// `g.recv_any(buf)`, which says who sent it) on another, at any time,
/// mixed freely with collectives (a message never takes a collective's
/// place, nor the other way round). Messages from one rank with one tag
/// are received in the order they were sent; a recv takes the oldest
/// message that matches it, or waits for the next one. Any size: up to
/// eager_size inline, larger ones read by the receiver from the sender's
/// buffer (the send returns once it has been read). A message nobody
/// asked for yet waits on the receiving rank: up to `window` of them per
/// sender are copied aside (their receives and credits go back at once, so
/// a collective after them never waits behind them); beyond that the
/// sender waits for credit, as MPI_Send may. start_send and start_recv
/// start one now for a co_await later (pending.hpp).
///
/// Failure: a collective that fails (a rank died, a mismatch, its deadline,
/// its stop token) breaks the group: every pending and later collective on
/// this rank throws group_error, and the other ranks are told (they fail
/// too, naming this rank and the reason). A rank that dies, or whose
/// connection breaks, makes every pending collective on the others fail
/// within 5 s, naming it. Form a new group to go on. The connections
/// themselves stay usable where they still work.
///
/// Threads: every call resumes on the builder's event listener thread.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/export.hpp>
#include <cordma/latency_histogram.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/pending.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>

namespace cordma {

namespace detail {
class group_core;
class group_bootstrap;
}  // namespace detail

/// A group operation failed, or a group could not form. code() is
/// std::errc::timed_out for deadlines, operation_canceled for a stop token,
/// connection_aborted when a rank went away or broke the group,
/// invalid_argument for mismatched calls; what() names the ranks concerned
/// (and their endpoints) and what each side did.
class CORDMA_API group_error : public std::system_error {
public:
    /// An error with `code` (one of those above), `message` as its what(),
    /// and the ranks at fault.
    group_error(std::errc code, std::string message, std::vector<int> ranks = {})
        : std::system_error(std::make_error_code(code)), message_(std::move(message)), ranks_(std::move(ranks)) {}
    /// The message alone (naming the call, the ranks and what each did),
    /// without the code's text appended as std::system_error would.
    const char* what() const noexcept override { return message_.c_str(); }
    /// The ranks at fault (that never came, that died, that called
    /// something else); empty when it is this rank's own deadline or stop.
    const std::vector<int>& ranks() const noexcept { return ranks_; }

private:
    std::string message_;
    std::vector<int> ranks_;
};

/// How a group finds its members, and its limits.
struct CORDMA_API group_options {
    /// This process's rank, 0 <= rank < hosts.size() (with a host list).
    int rank = -1;
    /// Every rank's endpoint, "host:port", index = rank: rank r listens on
    /// hosts[r] (the mesh tool's address array). Empty when a launcher
    /// (bootstrap) provides them.
    std::vector<std::string> hosts;
    /// With a launcher: the address this rank listens on, "ip" or "ip:port"
    /// (default: the IPv4 address of the builder's RDMA device, any free
    /// port). Ignored with a host list.
    std::string listen_address;
    /// The whole formation (endpoint exchange, every connect and accept)
    /// must finish within this; then form() throws group_error naming the
    /// ranks that never came.
    std::chrono::milliseconds formation_timeout{60'000};
    /// The default deadline of each collective (group_call::timeout).
    std::chrono::milliseconds operation_timeout{60'000};
    /// While a collective waits, each peer is pinged twice a second (its
    /// event listener answers, whatever its application does); a peer that
    /// answers nothing for this long is taken for gone (a host powered off
    /// or cut off sends no disconnect; a process that dies does, and is
    /// named at once). A wait for a host that is gone ends within
    /// peer_timeout + 1 s. Lower it for faster detection where hosts never
    /// stall; at least 1 s.
    std::chrono::milliseconds peer_timeout{10'000};
    /// Messages up to this many bytes travel inline, in receives the group
    /// keeps posted (group_options::window of them per peer); larger ones
    /// are read from the sender's buffer. 64 B to 1 MiB.
    std::size_t eager_size = 8192;
    /// Messages a rank may send to one peer before that peer has taken
    /// them (its receives posted per peer, and the memory they use:
    /// about 2 * window * eager_size per peer). 2 to 256.
    std::uint32_t window = 16;

    /// Where the endpoints come from, set by from_environment() (a PMIx or
    /// torchrun-style launcher); null for a host list.
    std::shared_ptr<detail::group_bootstrap> bootstrap;

    /// A host list and this process's rank in it.
    static group_options from_hosts(std::vector<std::string> hosts, int rank);
    /// Whatever launcher started this process, in this order:
    /// 1. PMIx (mpirun, srun --mpi=pmix, PRRTE): used when PMIx_Init
    ///    succeeds (its variables alone prove nothing: mpirun sets them for
    ///    non-MPI children too), if cordma was built with PMIx;
    /// 2. torchrun's variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
    ///    rank 0 serves a small TCP rendezvous on MASTER_ADDR:MASTER_PORT
    ///    where every rank publishes its endpoint and fetches the others';
    /// 3. CORDMA_GROUP_HOSTS (comma-separated endpoints) and
    ///    CORDMA_GROUP_RANK.
    /// CORDMA_GROUP_ADDRESS sets listen_address. Throws
    /// std::runtime_error saying what it found and what is missing (e.g.
    /// RANK and WORLD_SIZE set but not MASTER_ADDR).
    static group_options from_environment();
    /// What provides the endpoints, for logs: "host list (rank 1 of 3)",
    /// "PMIx (namespace ..., rank 2 of 4)", "torchrun environment ...".
    std::string describe() const;
};

/// One collective's deadline and stop.
struct CORDMA_API group_call {
    /// How long the call may take, in all; 0: group_options::operation_timeout.
    std::chrono::milliseconds timeout{0};
    /// Stops the call early (from any thread).
    std::stop_token stop{};
    /// A trace id (trace.hpp; empty: none). A collective's frames from
    /// this rank carry it, its stuck-report entry shows it, and it opens a
    /// span (span_kind::collective) on the span hook; a send's message
    /// carries it to the receiver's message_info::trace.
    trace_id trace{};
};

/// What reduce and all_reduce compute for each element, over all ranks.
enum class reduce_op {
    sum,  ///< the sum
    min,  ///< the smallest value
    max,  ///< the largest value
};

/// The element types reductions work on.
enum class element_type { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };

/// The element_type of T (8- to 64-bit integers, float, double): what the
/// typed reduce<T> and all_reduce<T> pass. Any other T fails to compile.
template <class T>
constexpr element_type element_type_of() {
    if constexpr (std::is_same_v<T, std::int8_t>) return element_type::i8;
    else if constexpr (std::is_same_v<T, std::uint8_t>) return element_type::u8;
    else if constexpr (std::is_same_v<T, std::int16_t>) return element_type::i16;
    else if constexpr (std::is_same_v<T, std::uint16_t>) return element_type::u16;
    else if constexpr (std::is_same_v<T, std::int32_t>) return element_type::i32;
    else if constexpr (std::is_same_v<T, std::uint32_t>) return element_type::u32;
    else if constexpr (std::is_same_v<T, std::int64_t>) return element_type::i64;
    else if constexpr (std::is_same_v<T, std::uint64_t>) return element_type::u64;
    else if constexpr (std::is_same_v<T, float>) return element_type::f32;
    else if constexpr (std::is_same_v<T, double>) return element_type::f64;
    else static_assert(sizeof(T) == 0, "reductions take 8- to 64-bit integers, float and double");
}

/// What a point-to-point recv took: who sent it, with which tag, and how
/// many bytes (at the start of the recv's buffer).
struct message_info {
    /// The sending rank.
    int source = -1;
    /// The tag it was sent with.
    std::uint32_t tag = 0;
    /// Its length in bytes.
    std::size_t size = 0;
    /// The trace id its sender gave the send (group_call::trace; empty if
    /// none).
    trace_id trace{};
};

/// The order all_to_all exchanges its blocks in.
enum class all_to_all_order {
    /// Every pair at once (the default): each rank sends to and receives
    /// from all the others concurrently.
    pairwise,
    /// One step at a time, as rdma_lib's rdma_sequential_alltoall: in step
    /// s = 1..N-1 rank r sends to r+s and receives from r-s (mod N).
    sequential,
};

/// One kind of collective on one rank of a group (group::metrics).
struct collective_metrics {
    /// "barrier", "broadcast", "all_to_all", "all_gather", "gather",
    /// "scatter", "reduce" or "all_reduce", as the call is spelled.
    const char* kind = "";
    /// Calls made on this rank (refused ones included: another collective
    /// in progress, the group already failed).
    std::uint64_t calls = 0;
    /// Calls that returned.
    std::uint64_t completed = 0;
    /// Calls that threw.
    std::uint64_t failed = 0;
    /// How long the completed ones took on this rank: from the turn of its
    /// event listener's loop that started one to the turn that finished it
    /// (waiting for the slowest rank included).
    latency_histogram latency;
};

/// What a group's collectives came to on this rank (group::metrics): exact
/// counts, kept on the event listener thread and read from any thread.
/// Every group's are also summed on the process's metrics pages
/// (metrics_endpoint.hpp: cordma_group_*).
struct group_metrics {
    /// By kind: barrier, broadcast, all_to_all, all_gather, gather,
    /// scatter, reduce, all_reduce.
    std::array<collective_metrics, 8> collectives;
};

/// A fully connected mesh of N processes (ranks), with collectives over it
/// (the contract is at the top of this header): every rank forms it with
/// the same options, then makes the same collective calls in the same
/// order. A cheap handle: copies share the group, whose connections close
/// with the last copy or close().
class CORDMA_API group {
public:
    /// An empty handle: every call but operator bool throws std::logic_error.
    group() = default;

    /// Forms the group: gets every rank's endpoint (options), listens on
    /// this rank's, connects the mesh through `b` (its settings apply to
    /// every connection; its connect_timeout is stretched to the
    /// formation deadline) and exchanges what collectives need. Throws
    /// std::invalid_argument for bad options (naming them), group_error
    /// when the formation deadline passes (naming the missing ranks) or a
    /// peer belongs to another group.
    static task<group> form(builder b, group_options options);

    /// False for an empty (default-constructed or moved-from) handle; says
    /// nothing about whether the group is still whole.
    explicit operator bool() const noexcept { return state_ != nullptr; }
    /// This process's rank, 0 to size() - 1.
    int rank() const;
    /// How many ranks the group has (N).
    int size() const;
    /// The connection to rank `r` (r != rank()): an ordinary connection,
    /// every operation and the agent available. Its receives belong to the
    /// group (a receive_queue): recv on it throws std::logic_error.
    const cordma::connection& connection(int r) const;
    /// Rank r's endpoint ("10.78.0.2:7600").
    const std::string& endpoint(int r) const;
    /// Registered memory for collectives (from the builder's pool).
    local_mr allocate(std::size_t size) const;
    /// Its collectives so far, by kind (counts and latency). Any thread.
    group_metrics metrics() const;

    /// Returns once every rank has called it (dissemination: log2 N rounds
    /// of empty messages).
    task<void> barrier(group_call call = {});
    /// Root's `buffer` to every rank's `buffer` (same size everywhere).
    task<void> broadcast(local_slice buffer, int root, group_call call = {});
    /// `send` holds N blocks of send.size()/N bytes; block j goes to rank j,
    /// and rank j's block for this rank lands in block j of `recv` (the same
    /// size). Both sizes must match on every rank.
    task<void> all_to_all(local_slice send, local_slice recv, all_to_all_order order = all_to_all_order::pairwise,
                          group_call call = {});
    /// Every rank's `send` (same size everywhere) into block r of every
    /// rank's `recv` (N times as big).
    task<void> all_gather(local_slice send, local_slice recv, group_call call = {});
    /// Every rank's `send` into block r of root's `recv` (N times as big);
    /// `recv` is ignored elsewhere (pass an empty slice).
    task<void> gather(local_slice send, local_slice recv, int root, group_call call = {});
    /// Block r of root's `send` (N blocks) into rank r's `recv`; `send` is
    /// ignored elsewhere.
    task<void> scatter(local_slice send, local_slice recv, int root, group_call call = {});
    /// Element-wise `op` of every rank's `send` (an array of `type`) into
    /// root's `recv` (same size; ignored elsewhere). send and recv may be
    /// the same slice.
    task<void> reduce(local_slice send, local_slice recv, element_type type, reduce_op op, int root,
                      group_call call = {});
    /// As reduce, with the result in every rank's `recv`.
    task<void> all_reduce(local_slice send, local_slice recv, element_type type, reduce_op op, group_call call = {});

    /// reduce on an array of T: `co_await g.reduce<float>(send, recv,
    /// reduce_op::sum, 0)`.
    template <class T>
    task<void> reduce(local_slice send, local_slice recv, reduce_op op, int root, group_call call = {}) {
        return reduce(std::move(send), std::move(recv), element_type_of<T>(), op, root, std::move(call));
    }
    /// all_reduce on an array of T: `co_await g.all_reduce<std::int64_t>(send,
    /// recv, reduce_op::max)`.
    template <class T>
    task<void> all_reduce(local_slice send, local_slice recv, reduce_op op, group_call call = {}) {
        return all_reduce(std::move(send), std::move(recv), element_type_of<T>(), op, std::move(call));
    }

    /// A recv's tag that matches every tag (MPI_ANY_TAG). Sends may not
    /// use it.
    static constexpr std::uint32_t any_tag = 0xffffffffu;

    /// Sends `buffer` to rank `dest` as one message with `tag`; returns
    /// once `buffer` may be reused: at once up to group_options::eager_size
    /// (copied), else once `dest` has read it (its recv must come). Waits
    /// for credit first if `dest` has `window` messages and frames not yet
    /// taken. Throws std::out_of_range for a rank that is not another
    /// rank of the group, std::invalid_argument for any_tag, group_error:
    /// timed_out or operation_canceled (call's deadline or stop) if it had
    /// not been sent yet (nothing sent; the group goes on), the group's
    /// failure otherwise (a large message whose reader did not come in
    /// time breaks the group: its buffer may still be read).
    task<void> send(int dest, local_slice buffer, std::uint32_t tag = 0, group_call call = {});
    /// Receives the oldest message from rank `source` with `tag` (any_tag:
    /// whatever its tag) into `buffer`, waiting for one if none is there.
    /// A message longer than `buffer` is not taken: group_error
    /// (message_size, naming both sizes), and it stays for a recv with
    /// room. Deadline or stop: group_error (timed_out, operation_canceled),
    /// nothing taken, the group goes on. A source that went away with
    /// nothing left for this recv breaks the group, naming it.
    task<message_info> recv(int source, local_slice buffer, std::uint32_t tag = any_tag, group_call call = {});
    /// As recv, from whichever rank's matching message came first
    /// (MPI_ANY_SOURCE); message_info::source says which.
    task<message_info> recv_any(local_slice buffer, std::uint32_t tag = any_tag, group_call call = {});
    /// send, started now: its frame is posted before this returns when
    /// credit is there (so sends started in order go in order); co_await
    /// wait() on the result later. `buffer` must stay valid until then.
    pending<void> start_send(int dest, local_slice buffer, std::uint32_t tag = 0, group_call call = {});
    /// recv, started now: it takes the oldest matching message, kept
    /// already or the next to arrive, ahead of every recv started after
    /// it; co_await wait() on the result later. `buffer` must stay valid
    /// until then.
    pending<message_info> start_recv(int source, local_slice buffer, std::uint32_t tag = any_tag,
                                     group_call call = {});
    /// recv_any, started now.
    pending<message_info> start_recv_any(local_slice buffer, std::uint32_t tag = any_tag, group_call call = {});

    /// Closes every connection of the group; pending collectives throw.
    /// Never throws.
    task<void> close();

private:
    explicit group(std::shared_ptr<detail::group_core> state) : state_(std::move(state)) {}
    detail::group_core& checked(const char* call) const;

    std::shared_ptr<detail::group_core> state_;
};

}  // namespace cordma
