#pragma once
/// What a cordma_context is behind the C API (include/cordma/cordma.h):
/// a builder (device, event listener thread, PD, pool), maybe a listener,
/// and the peers, each a group peer_link (frames, credits, eager data and
/// rendezvous reads) owned by a peer_state that fails alone. Every C call
/// runs as a task on the event listener thread while the calling thread
/// waits (c_call.hpp), under the context's deadline, with keepalives to the
/// peers while it waits.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <type_traits>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/cordma.h>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>

#include "core/coarse_clock.hpp"
#include "link/link_wire.hpp"
#include "link/peer_link.hpp"

namespace cordma::detail::c_api {

/// A failure the C caller sees as errno `errnum` and a message (the entry
/// point adds "cordma_call(peer N, address): " in front).
class c_failure : public std::runtime_error {
public:
    c_failure(int errnum, const std::string& what) : std::runtime_error(what), errnum_(errnum) {}
    int errnum() const noexcept { return errnum_; }

private:
    int errnum_;
};

/// One peer of a context: its connection, its link, and whether it is
/// still usable. Event listener thread, except `usable` (any thread).
class peer_state : public link_owner, public std::enable_shared_from_this<peer_state> {
public:
    peer_state(int index, std::string address) : index(index), address(std::move(address)) {
        name = "peer " + std::to_string(index) + " (" + this->address + ")";
    }

    void fail(std::errc code, const std::string& why, int rank_at_fault, bool tell_peers) override;
    bool failed() const noexcept override { return failure_.has_value(); }
    [[noreturn]] void throw_failure() const override;
    const char* module_name() const noexcept override { return "C API"; }
    /// The C call an op belongs to ("cordma_alltoall"; c_frames.cpp).
    std::string op_name(link_wire::op o) const override;

    /// Throws c_failure unless the peer can carry a call (ENOTCONN).
    void check_usable() const;
    /// Fails the peer because a call gave up halfway through an exchange
    /// with it (a deadline): its frames and ours are out of step now.
    void fail_out_of_step(const std::string& call);

    const int index;
    const std::string address;
    std::string name;  // "peer 1 (10.0.0.3:40512)"
    cordma::connection conn;
    std::shared_ptr<peer_link> link;
    /// A frame taken but not consumed: a message larger than the caller's
    /// buffer, or a frame another call must take. The next call gets it.
    std::optional<inbound_frame> held;
    /// Frames this side sent (their seq), for the peer's error messages.
    std::uint32_t next_seq = 0;
    /// The trace id its frames carry (cordma_set_trace's; empty: none).
    /// Written under the context's call lock and its peers_mutex, read by
    /// calls (which hold the call lock).
    trace_id trace{};
    /// The trace id of the last frame taken from it (cordma_last_trace).
    trace_id last_trace{};
    /// Grants taken with cordma_accept_grant, by id.
    std::map<std::uint64_t, remote_mr> grants;
    std::atomic<bool> usable{true};
    bool disconnected = false;

private:
    std::optional<std::pair<int, std::string>> failure_;  // errno, why
};

/// The call in progress and the watch over it (event listener thread
/// only). One per context, reused by every call: a call arms nothing of
/// its own. The watch is one timer that fires a keepalive tick (every
/// tick_interval) or the call's deadline, whichever comes first, while a
/// call runs; it lapses between calls and the next call re-arms it.
struct call_state {
    bool active = false;
    int timeout_ms = 0;  // 0: none
    bool timed_out = false;
    coarse_clock::time_point deadline{};
    coarse_clock::time_point last_tick{};
    /// A fresh one only after a call was stopped (a deadline).
    std::stop_source stop;
    std::shared_ptr<event_listener::timer> watch;
    coarse_clock::time_point watch_at{};
};

class arrivals;

}  // namespace cordma::detail::c_api

struct cordma_context {
    cordma_config config{};
    std::string address;  // config.address, owned
    cordma::builder builder;
    std::shared_ptr<cordma::event_listener> listener_thread;
    std::optional<cordma::listener> incoming;
    /// The listener's clients until cordma_accept, their receives posted.
    std::shared_ptr<cordma::detail::c_api::arrivals> arrivals;
    int local_port = -1;

    /// One C call at a time (cordma.h, "Threads").
    std::mutex call_mutex;
    /// Guards `peers` for the accessors, which do not take call_mutex.
    mutable std::mutex peers_mutex;
    std::vector<std::shared_ptr<cordma::detail::c_api::peer_state>> peers;
    /// cordma_set_trace's id, copied to every peer (and to each new one,
    /// under peers_mutex).
    cordma::trace_id trace{};
    /// Registrations of memory granted with cordma_grant, by address.
    std::multimap<const void*, cordma::local_mr> granted;

    /// The call in progress (event listener thread).
    cordma::detail::c_api::call_state call;
};

namespace cordma::detail::c_api {

/// How long a cordma_grant lasts unless revoked: a year (the agent's
/// max_lease is raised to it on a C context's builder).
inline constexpr std::chrono::milliseconds c_grant_lease{std::chrono::hours(24 * 365)};

/// How often a waiting call checks the peers (keepalives).
inline constexpr std::chrono::milliseconds tick_interval{500};

/// The stop token of the call in progress (event listener thread).
std::stop_token call_token(cordma_context& ctx);

/// Starts the call's deadline (`timeout_ms`, 0: none) and keepalives
/// (event listener thread).
void arm_call(cordma_context& ctx, int timeout_ms);
/// Ends them; with `last` (the context's last call) the watch too, for good.
void disarm_call(cordma_context& ctx, bool last) noexcept;

/// The integer a C caller stored in an enum (a cordma_config field, an
/// argument). C lets an enum hold any value of its integer type; C++ makes
/// reading one outside the enumerators, as the enum type, undefined (and
/// UBSan stops on it). So the value is looked at as an integer until it is
/// known to be valid.
template <class E>
long long c_enum_value(const E& value) noexcept {
    std::underlying_type_t<E> raw;
    std::memcpy(&raw, &value, sizeof raw);
    return static_cast<long long>(raw);
}

/// `ctx`, or c_failure EINVAL for NULL.
cordma_context& checked_context(cordma_context* ctx);
/// Takes `ctx`'s call_mutex for one call, or throws c_failure EDEADLK when
/// this thread runs the context's loop (a log sink called during a call on
/// it): the call would wait for the loop this thread is inside, or for the
/// mutex the outer call holds.
std::unique_lock<std::mutex> lock_call(cordma_context& ctx);
/// The peer numbered `peer`, or c_failure EINVAL saying which numbers exist.
peer_state& peer_at(cordma_context& ctx, int peer);
/// The same, as a handle a task can keep.
std::shared_ptr<peer_state> peer_handle(cordma_context& ctx, int peer);
/// Every peer still usable, in peer order (a snapshot).
std::vector<std::shared_ptr<peer_state>> connected_peers(cordma_context& ctx);

/// A failed C call: records errno and "call(subject): reason" for
/// cordma_last_error, from the exception in flight. Never throws.
void record_failure(const char* call, const std::string& subject, std::exception_ptr error) noexcept;

/// "peer 1, 10.0.0.3:40512" for a message's subject.
std::string subject_of(const cordma_context& ctx, int peer);

}  // namespace cordma::detail::c_api
