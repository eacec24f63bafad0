#pragma once
/// The memory-region agent of one connection: serves the peer's requests
/// for memory from this side's pool, tracks what it granted (leases,
/// limits) and what it holds, over the connection's control queue pair.
/// Event listener thread only.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <cordma/agent_limits.hpp>
#include <cordma/connection.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/task.hpp>
#include "agent/agent_protocol.hpp"
#include "engine/connection_state.hpp"
#include "engine/waiter_queue.hpp"

namespace cordma::detail {

/// A value handed from one listener-thread coroutine to another.
template <class T>
struct handoff {
    std::coroutine_handle<> waiter;
    std::optional<T> value;
    std::exception_ptr error;

    void set(T v) {
        value.emplace(std::move(v));
        wake();
    }
    void fail(std::exception_ptr e) {
        error = std::move(e);
        wake();
    }
    void wake() {
        if (auto h = std::exchange(waiter, nullptr))
            h.resume();
    }
    auto wait() {
        struct awaiter {
            handoff* self;
            bool await_ready() const noexcept { return self->value.has_value() || self->error; }
            void await_suspend(std::coroutine_handle<> h) noexcept { self->waiter = h; }
            T await_resume() {
                if (self->error)
                    std::rethrow_exception(self->error);
                return std::move(*self->value);
            }
        };
        return awaiter{this};
    }
};

class agent : public connection_companion, public std::enable_shared_from_this<agent> {
public:
    agent(std::shared_ptr<event_listener> listener, std::shared_ptr<memory_pool> pool, agent_limits limits,
          std::string peer);
    ~agent();

    /// The control connection is up: start serving. Event listener thread.
    void attach(connection control, std::weak_ptr<connection_state> data);
    /// The connection is gone: fail every waiter with `why`, revoke grants.
    void shut_down(const std::string& why) noexcept override;

    task<remote_mr> request_remote_mr(std::size_t size, std::size_t alignment, std::chrono::milliseconds lease,
                                          access_flags access);
    task<void> send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access);
    task<remote_mr> receive_remote_mr();
    task<void> send_remote_mr(remote_mr region);
    task<local_mr> receive_local_mr();
    /// Withdraws every grant of memory in `region`. Returns how many.
    task<std::size_t> revoke(local_slice region);

    /// From remote_mr's destructor: any thread.
    void release_held(std::uint64_t region_id) noexcept;

    /// Bytes and regions granted to the peer right now.
    std::size_t granted_bytes() const noexcept { return granted_bytes_; }
    std::size_t granted_regions() const noexcept { return grants_.size(); }
    const connection& control() const noexcept { return control_; }

private:
    struct grant {
        local_slice memory;            // keeps the memory alive while granted
        memory_region registration;    // its own MR: deregistering cuts the peer off
        std::shared_ptr<event_listener::timer> lease_timer;
        bool returnable_as_local = false;
    };

    task<void> receive_loop(local_mr buffer);
    task<void> send_message(agent_protocol::message m);
    void send_detached(agent_protocol::message m);
    void handle(const agent_protocol::message& m);
    void on_request(const agent_protocol::request_mr& m);
    task<void> answer_request(agent_protocol::request_mr m);
    std::uint64_t add_grant(local_slice memory, access_flags access, std::chrono::milliseconds lease,
                            agent_protocol::grant_mr& out);
    void drop_grant(std::uint64_t region_id, bool tell_peer) noexcept;
    remote_mr to_region(const agent_protocol::grant_mr& g);
    task<void> ready();
    std::chrono::milliseconds clamp_lease(std::chrono::milliseconds requested) const;

    std::shared_ptr<memory_pool> pool_;
    agent_limits limits_;
    std::string peer_;
    connection control_;
    std::weak_ptr<connection_state> data_;
    std::shared_ptr<event_listener> event_listener_;
    bool attached_ = false;
    bool dead_ = false;
    std::string death_;
    std::deque<std::shared_ptr<handoff<bool>>> ready_waiters_;

    std::uint32_t next_request_id_ = 1;
    std::uint64_t next_region_id_ = 1;
    // Regions the peer granted us, still held: their "ended" flags, set
    // when the owner's revoke_mr arrives (remote_mr::expired()).
    std::map<std::uint64_t, std::weak_ptr<std::atomic<bool>>> held_;
    std::map<std::uint32_t, std::shared_ptr<handoff<agent_protocol::message>>> requests_;
    std::map<std::uint64_t, grant> grants_;
    std::size_t granted_bytes_ = 0;

    // Regions the peer granted (send_local_mr) and handed back
    // (send_remote_mr), waiting for receive_remote_mr / receive_local_mr.
    std::shared_ptr<waiter_queue<remote_mr>> incoming_remote_;
    std::shared_ptr<waiter_queue<local_mr>> incoming_local_;
};

/// The agent of a connection (null for one without: connection::adopt, a
/// peer that is not cordma).
inline std::shared_ptr<agent> agent_of(const connection_state& state) {
    return std::static_pointer_cast<agent>(state.agent);
}

}  // namespace cordma::detail
