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
#include "rpc/rpc_wire.hpp"
#include "log/logf.hpp"


namespace cordma::rpc::detail {

namespace wire = cordma::detail::rpc_wire;

/// A large response the client has yet to read: kept registered until its
/// `done` (or the end of the connection).
struct lent_response {
    std::vector<std::byte> bytes;
    local_mr registration;
};

struct session {
    cordma::connection conn;
    std::string peer;
    std::uint32_t qp_num = 0;
    std::size_t client_eager = 0;        // the largest inline response it takes
    std::uint64_t client_max_response = 0;
    std::uint32_t charged = 0;           // its calls holding a credit
    std::uint32_t unreturned = 0;        // credits to hand back with the next frame
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
    void handle_any(std::string name, handler h);
    task<void> serve(listener l, std::stop_token token);
    void shut_down() noexcept;

    std::size_t clients() const;
    std::vector<cordma::connection> connections() const;
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
    void call_finished(session& s);
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
    std::shared_ptr<protection_domain> pd_;
    cordma::shared_receive_queue srq_;
    std::unique_ptr<std::byte[]> heartbeat_memory_;
    local_mr heartbeat_;
    cordma::detail::frame_buffers buffers_;
    std::map<std::uint32_t, std::pair<std::string, handler>> handlers_;
    std::optional<std::pair<std::string, handler>> any_;  // for methods not in handlers_
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
    std::vector<std::coroutine_handle<>> idle_waiters_;
    bool loops_started_ = false;
    bool warned_receives_ = false;
    bool shut_ = false;
};

}  // namespace cordma::rpc::detail
