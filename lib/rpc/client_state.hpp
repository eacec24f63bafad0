#pragma once
/// What an rpc::client is: calls numbered and matched by id, credits from
/// the server, a reader of the client's receive queue, rendezvous both ways,
/// a liveness read while calls wait. The protocol is in rpc_wire.hpp and
/// docs/rpc.md. Split by concern: client_state.cpp takes the server's frames
/// (responses, credits, rendezvous reads) and ends the calls;
/// client_calls.cpp runs one call, from its request frame to its answer,
/// with its deadline and the liveness read; rpc_client.cpp is the public
/// rpc::client. Event listener thread, except where rpc::client says
/// otherwise.

#include <cordma/rpc.hpp>

#include <chrono>
#include <coroutine>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cordma/receive_queue.hpp>

#include "core/coarse_clock.hpp"
#include "core/trace_span.hpp"
#include "engine/pending_source.hpp"
#include "link/elastic_receives.hpp"
#include "rpc/client_tally.hpp"
#include "rpc/frame_buffers.hpp"
#include "rpc/rpc_wire.hpp"

namespace cordma::rpc::detail {

namespace wire = cordma::detail::rpc_wire;

/// While calls wait, the client reads the server's liveness word this
/// often, and takes the server for gone when a read is not answered in time.
inline constexpr std::chrono::seconds liveness_interval{1};
inline constexpr std::chrono::milliseconds liveness_timeout{3000};

using cordma::detail::coarse_clock;

/// A call from its start to its answer; lives in the calling coroutine's frame.
struct pending_call {
    std::uint64_t id = 0;
    std::uint32_t method = 0;
    std::coroutine_handle<> waiter;
    bool has_credit = false;
    bool sent = false;
    bool finished = false;
    std::vector<std::byte> response;  // call()
    std::span<std::byte> into;        // call_into(): the caller's memory...
    bool into_mode = false;
    std::size_t size = 0;             // ... and how much of it the response filled
    std::optional<rpc_errc> error;
    std::string message;
    local_mr registration;  // a large request, for the server to read
    coarse_clock::time_point deadline;
    std::chrono::milliseconds limit{0};
    std::uint64_t began_tick = 0;  // the loop turn's ticks at its start (its latency)
    std::uint64_t began_ms = 0;    // ... and its coarse ms (its age in a stuck report)
    std::size_t request_size = 0;
    trace_id trace;                        // the caller's (call_options::trace)
    cordma::detail::traced_span span;      // open while a traced call runs
};

struct wait_for {
    pending_call* call;
    bool for_credit;
    bool await_ready() const noexcept { return call->finished || (for_credit && call->has_credit); }
    void await_suspend(std::coroutine_handle<> h) noexcept { call->waiter = h; }
    void await_resume() noexcept { call->waiter = {}; }
};

class client_state : public std::enable_shared_from_this<client_state> {
public:
    client_state(builder b, client_options options, cordma::connection conn, const wire::header& hello);

    void start();
    /// One call from its credit to its answer: `c` (in the caller's
    /// frame) says where the response goes and holds how it ended.
    task<void> run(pending_call& c, std::uint32_t method, std::span<const std::byte> request, call_options o);
    void shut_down(rpc_errc why, const std::string& message) noexcept;
    task<void> close(std::string why = "the client was closed");

    const std::string& peer() const noexcept { return peer_; }
    std::uint32_t credits() const noexcept { return credits_; }
    const cordma::connection& connection() const noexcept { return conn_; }
    /// Its calls' counts (client::metrics; any thread).
    client_metrics metrics() const noexcept { return tally_.read(); }
    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }

private:
    task<void> read_loop();
    task<void> liveness_loop();
    task<void> fetch(std::uint64_t id, wire::header h);
    task<void> send_done(std::uint64_t id);
    task<void> send_release(std::uint32_t credits);
    /// Sends a frame that is only its header (done, release).
    task<void> send_header(wire::header h);
    void on_frame(received_message m);
    /// The server asks for room (a grow frame): reposts are big from now
    /// on, and the next done says from which receive.
    void grow_receives();
    void finish(pending_call& c, std::optional<rpc_errc> error, std::string message);
    /// Ends `c` with the server's error: its status `code` and `message`.
    void finish_error(pending_call& c, std::uint32_t code, std::span<const std::byte> message);
    /// A successful response's bytes: into the call's vector, or copied
    /// into the caller's memory (too_large if they do not fit); ends it.
    void deliver(pending_call& c, std::span<const std::byte> payload);
    void fail(std::uint64_t id, rpc_errc error, std::string message);
    void broken(rpc_errc error, const std::string& why);
    void grant();
    /// In calls_ under its id, in a spare node if there is one.
    void track(pending_call& c);
    /// The next call's id: 32 bits (a request's compact header carries
    /// that many), never 0; once the counter has wrapped, never one a call
    /// in flight or an orphaned request still has.
    std::uint64_t take_id() noexcept {
        for (;;) {
            std::uint32_t id = next_id_++;
            if (id == 0) {
                wrapped_ = true;
                continue;
            }
            if (!wrapped_ || (!calls_.contains(id) && !orphans_.contains(id)))
                return id;
        }
    }
    void forget(pending_call& c) noexcept;
    /// Deadlines: one timer for the earliest of the calls', re-armed as it
    /// fires, rather than one per call (a kernel timeout each, alive for the
    /// whole deadline even when the call ends in microseconds).
    void watch_deadline(coarse_clock::time_point when);
    void on_deadline();
    std::string what_call(const pending_call& c) const {
        return "cordma::rpc call " + std::to_string(c.id) + " of method " + std::to_string(c.method) + " to " + peer_ +
               (c.trace.empty() ? "" : " (trace " + c.trace.to_string() + ")");
    }
    /// A traced call's span, as the span hook sees it (`name` its storage).
    span_info span_of(const pending_call& c, std::string& name) const;
    std::string too_large_for_buffer(const pending_call& c, std::size_t bytes) const {
        return what_call(c) + " (call_into): a response of " + std::to_string(bytes) +
               " bytes, larger than the call's response buffer of " + std::to_string(c.into.size()) +
               " bytes; give a larger buffer, or use call(), which sizes one";
    }

    builder builder_;
    client_options options_;
    cordma::connection conn_;
    client_tally tally_;  // calls, answers and errors (client::metrics)
    std::string peer_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    // Its loop's turn ticks (event_listener_access::turn_tick): calls'
    // latencies start and end there.
    const std::uint64_t* turn_tick_ = nullptr;
    std::optional<receive_queue> receives_;
    // Small until the server asks for room, small again when it says so
    // (null when the eager size is small anyway).
    std::shared_ptr<cordma::detail::elastic_receives> elastic_;
    // The answer to a grow, for the next done: {first big receive, room}.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> room_answer_;
    cordma::detail::frame_buffers buffers_;
    std::uint32_t credits_ = 0;    // what the server grants (its hello, or its first credit frame)
    std::uint32_t available_ = 0;  // credits not in use
    std::size_t server_eager_ = 0;
    std::uint64_t server_max_request_ = 0;
    bool server_reads_traces_ = false;  // its hello's hello_traces
    remote_slice liveness_word_;
    local_mr liveness_local_;
    std::uint32_t next_id_ = 1;
    bool wrapped_ = false;  // next_id_ has gone round: take_id checks for ids in use
    std::unordered_map<std::uint64_t, pending_call*> calls_;
    // Nodes of calls_ whose calls ended, for the next calls (track): a call
    // allocates no node while one is here.
    std::vector<std::unordered_map<std::uint64_t, pending_call*>::node_type> spare_nodes_;
    std::deque<pending_call*> credit_waiters_;
    // Large requests of calls that ended early: registered until the
    // server answers them (it may still be reading).
    std::unordered_map<std::uint64_t, local_mr> orphans_;
    std::optional<std::pair<rpc_errc, std::string>> broken_;
    bool liveness_running_ = false;
    std::shared_ptr<cordma::event_listener::timer> deadline_timer_;
    coarse_clock::time_point armed_for_ = coarse_clock::time_point::max();
    // Its loop's turn time in coarse ms (event_listener_access::turn_ms).
    const std::uint64_t* turn_ms_ = nullptr;
    std::uint32_t qp_num_ = 0;  // its connection's, for a stuck report
    /// Its calls in progress, for a stuck report (pending_source.hpp).
    static void collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);
    // Last: leaves the stuck reports before anything it reads goes.
    std::optional<cordma::detail::pending_source_registration> pending_source_;
};

}  // namespace cordma::rpc::detail
