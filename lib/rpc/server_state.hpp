#pragma once
/// What an rpc::server is: its clients' sessions, its handlers, the loops
/// that take frames from the shared receive queue (or each client's own),
/// and the calls in progress. Split by concern: server_state.cpp admits,
/// serves and drops clients; server_calls.cpp runs one call, from its
/// request frame to its response. Event listener thread, except where the
/// public rpc::server says otherwise.

#include <cordma/rpc.hpp>

#include <infiniband/verbs.h>

#include <algorithm>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/task_group.hpp>

#include "connect/acceptor.hpp"
#include "engine/run_and_wait.hpp"
#include "rpc/frame_buffers.hpp"
#include "engine/counter.hpp"
#include "engine/pending_source.hpp"
#include "rpc/rpc_wire.hpp"
#include "rpc/running_calls.hpp"
#include "rpc/server_metrics_view.hpp"
#include "log/logf.hpp"


namespace cordma::rpc::detail {

namespace wire = cordma::detail::rpc_wire;

/// A large response the client has yet to read: kept registered until its
/// `done` (or the end of the connection).
struct lent_response {
    std::vector<std::byte> bytes;
    local_mr registration;
};

/// A registered method: its name (for logs and errors) and its handler,
/// one of the two kinds (handle, handle_into).
struct handler_entry {
    std::string name;
    handler returns;           // handle(): returns the response's bytes
    reply_handler fills;       // handle_into(): writes them into the response frame
    /// Its calls (server::metrics); shared with the server's view of them.
    using tally = method_tally;
    std::shared_ptr<tally> counts = std::make_shared<tally>();
};

struct session {
    cordma::connection conn;
    std::string peer;
    std::uint32_t qp_num = 0;
    // Its receives (rpc_wire.hpp, "Elastic receives"): a frame numbered n
    // (counting every frame sent to it, from 0) lands in a receive holding
    // room_for(n) bytes of payload.
    enum class growth : std::uint8_t { small, asked, grown, refused };
    std::size_t room_small = 0;          // its hello's inline size
    std::size_t room_big = 0;            // ... once grown (its hello; 0: never grows)
    std::uint32_t client_receives = 0;   // how many it posts (its room answer)
    growth room_state = growth::small;
    std::uint64_t frames_sent = 0;
    std::uint64_t room_switch = 0;       // from this frame on, room_after
    std::size_t room_before = 0;
    std::size_t room_after = 0;
    std::uint64_t big_frames = 0;        // frames sent that needed more than room_small
    std::uint64_t big_frames_seen = 0;   // ... at the last idle check
    std::size_t room_for(std::uint64_t n) const noexcept { return n >= room_switch ? room_after : room_before; }
    std::uint64_t client_max_response = 0;
    std::uint32_t granted = 0;           // credits it holds in any form (in use, unused, on their way back)
    std::uint32_t charged = 0;           // its calls holding a credit
    std::uint32_t unreturned = 0;        // credits to hand back with the next frame
    bool wanting = false;                // in server_state::wanting_
    bool asked_back = false;             // a credit frame asked for unused credits, not answered yet
    std::uint64_t requests = 0;          // its requests so far
    std::uint64_t requests_seen = 0;     // ... when server_state::reclaim() last looked
    std::uint32_t idle_looks = 0;        // how many of its looks in a row found no new request
    std::size_t active = 0;              // calls whose handler runs (a response would carry credits)
    std::size_t in_progress = 0;         // calls not answered yet: what serve() waits for
    std::unordered_map<std::uint64_t, lent_response> lent;
    std::optional<receive_queue> own_receives;  // without the SRQ
    bool gone = false;
};

class server_state : public std::enable_shared_from_this<server_state> {
public:
    server_state(builder& b, server_options options);

    void handle(std::uint32_t method, std::string name, handler h);
    void handle_into(std::uint32_t method, std::string name, reply_handler h);
    void handle_any(std::string name, handler h);
    task<void> serve(listener l, std::stop_token token);
    void shut_down() noexcept;

    std::size_t clients() const;
    std::vector<cordma::connection> connections() const;
    server_metrics metrics() const;
    ibv_srq* srq_handle() const { return srq_ ? srq_.native_handle() : nullptr; }
    const server_options& options() const noexcept { return options_; }

private:
    void start_loops();
    task<void> dispatch_loop();
    task<void> ended_loop();
    task<void> own_receives_loop(std::shared_ptr<session> s);
    void admit(cordma::connection c);
    void on_frame(std::shared_ptr<session> s, received_message m);
    void violation(std::shared_ptr<session> s, std::string why);
    void drop(std::uint32_t qp_num, const std::string& why, bool closing = false);
    task<void> run_call(std::shared_ptr<session> s, wire::header h, received_message m);
    task<void> send_frame(std::shared_ptr<session> s, wire::header h, std::span<const std::byte> payload);
    /// Sends `buffer`, whose payload (`size` bytes after the header) is in
    /// place already; gives the buffer back after.
    task<void> send_buffer(std::shared_ptr<session> s, wire::header h, local_mr buffer, std::size_t size);
    void add_handler(std::uint32_t method, handler_entry e, const char* call);
    void call_finished(session& s);
    // Fair credits (docs/rpc.md, "Credits"): with the SRQ, every credit a
    // client holds is one of the SRQ's receives, so the credits granted in
    // all never pass budget_ and the SRQ never runs dry.
    /// What each client may hold now: the budget shared by the clients, at
    /// least 1 and at most server_options::credits.
    std::uint32_t fair_share() const noexcept;
    /// More clients than receives: the credits go round, one at most each.
    bool scarce() const noexcept;
    /// Puts `s` at the end of the queue for credits if it is below its share.
    void want(const std::shared_ptr<session>& s);
    /// Hands the budget's free credits to the clients waiting for them, in
    /// turn; asks idle clients for theirs if some still wait.
    void top_up();
    /// A call of `s` no longer holds its credit: back to `s`, or kept for a
    /// client waiting for one when `s` holds more than its share.
    void credit_back(const std::shared_ptr<session>& s);
    /// Asks clients holding unused credits beyond their share for them
    /// (again every 100 ms while clients wait and the budget is spent).
    void reclaim();
    void send_credits(const std::shared_ptr<session>& s, std::uint32_t ask_back = 0);
    // Elastic client receives (client_room.cpp).
    /// The payload that fits inline in `s`'s next frame.
    std::size_t room(const session& s) const noexcept { return s.room_for(s.frames_sent); }
    /// A response of `bytes` goes by rendezvous for want of room: asks `s`
    /// to grow its receives (once, until they shrink again).
    void ask_room(const std::shared_ptr<session>& s, std::size_t bytes);
    /// A done frame's room answer (addr, size); false if it is not a valid
    /// one (a violation).
    bool take_room(const std::shared_ptr<session>& s, const wire::header& h, std::string& why);
    /// Once a second while some client is grown: shrinks those whose room
    /// no frame needed since the last look.
    void check_rooms();
    void arm_room_timer();
    void set_room(session& s, std::uint64_t from, std::size_t size) noexcept;
    void send_header_frame(const std::shared_ptr<session>& s, wire::frame type);
    /// A call is answered (or its client gone): serve() may stop waiting.
    void answered(session& s);
    /// Resumes serve() waiting for the calls in progress, once there are none.
    void wake_if_idle(bool anyway = false) {
        if (active_ == 0 || anyway)
            for (auto h : std::exchange(idle_waiters_, {}))
                h.resume();
    }

    builder builder_;
    server_options options_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    // Its loop's turn ticks (event_listener_access::turn_tick): where a
    // call's latency starts and ends (method_tally::latency).
    const std::uint64_t* turn_tick_ = nullptr;
    std::shared_ptr<protection_domain> pd_;
    cordma::shared_receive_queue srq_;
    std::unique_ptr<std::byte[]> heartbeat_memory_;
    local_mr heartbeat_;
    cordma::detail::frame_buffers buffers_;
    std::map<std::uint32_t, handler_entry> handlers_;
    std::optional<handler_entry> any_;  // for methods not in handlers_
    // Every method's counts for any thread (server::metrics, the process's
    // metrics pages), and the calls to no method.
    std::shared_ptr<server_metrics_view> view_ = server_metrics_view::publish();
    std::unordered_map<std::uint32_t, std::shared_ptr<session>> sessions_;
    // Frames that arrived through the SRQ before serve() took their
    // connection from accept() (the client may send as soon as it is
    // connected): handled once it has.
    std::unordered_map<std::uint32_t, std::vector<received_message>> early_;
    // Connections dropped: their frames still in flight are dropped too
    // (until a new connection reuses the QP number).
    std::unordered_set<std::uint32_t> dropped_;
    std::vector<listener> listeners_;  // being served: closed by shut_down
    std::size_t active_ = 0;
    std::uint64_t budget_ = 0;         // the SRQ's receives (unbounded without it)
    std::uint64_t granted_total_ = 0;  // sum of the sessions' granted
    std::deque<std::shared_ptr<session>> wanting_;
    std::shared_ptr<cordma::event_listener::timer> reclaim_timer_;
    std::shared_ptr<cordma::event_listener::timer> room_timer_;
    std::size_t grown_clients_ = 0;
    std::vector<std::coroutine_handle<>> idle_waiters_;
    bool loops_started_ = false;
    bool shut_ = false;
    // The calls being served (their entries in run_call's frames), and the
    // loop's turn time that stamps them.
    cordma::detail::pending_list running_;
    const std::uint64_t* turn_ms_ = nullptr;
    /// Its calls in progress, for a stuck report (pending_source.hpp).
    static void collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);
    std::optional<cordma::detail::pending_source_registration> pending_source_;  // last: leaves reports first
};

}  // namespace cordma::rpc::detail
