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
#include <set>
#include <string>
#include <vector>

#include <cordma/agent_call.hpp>
#include <cordma/agent_limits.hpp>
#include <cordma/connection.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/task.hpp>
#include "agent/agent_tally.hpp"
#include "agent/agent_ledger.hpp"
#include "agent/call_deadline.hpp"
#include "agent/agent_protocol.hpp"
#include "engine/connection_state.hpp"
#include "engine/pending_list.hpp"
#include "engine/pending_source.hpp"
#include "engine/waiter_queue.hpp"

namespace cordma::detail {

class agent : public connection_companion, public std::enable_shared_from_this<agent> {
public:
    /// `call_timeout`: the default deadline of its calls (builder::agent_timeout).
    /// `ledger`: what each peer host holds over all connections of the
    /// builder (null: this agent's alone).
    agent(std::shared_ptr<event_listener> el, std::shared_ptr<memory_pool> pool, agent_limits limits,
          std::string peer, std::chrono::milliseconds call_timeout = std::chrono::seconds(30),
          std::shared_ptr<agent_ledger> ledger = nullptr);
    ~agent();

    /// The control connection is up: start serving. Event listener thread.
    void attach(connection control, std::weak_ptr<connection_state> data);
    /// The connection is gone: fail every waiter with `why`, revoke grants.
    void shut_down(const std::string& why) noexcept override;

    task<remote_mr> request_remote_mr(std::size_t size, std::size_t alignment, std::chrono::milliseconds lease,
                                      access_flags access, agent_call call);
    task<void> send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access,
                             agent_call call);
    task<remote_mr> receive_remote_mr(agent_call call);
    task<void> send_remote_mr(remote_mr region, agent_call call);
    task<local_mr> receive_local_mr(agent_call call);
    /// Withdraws every grant of memory in `region`. Returns how many.
    task<std::size_t> revoke(local_slice region);

    /// From remote_mr's destructor: any thread.
    void release_held(std::uint64_t region_id) noexcept;

    /// Bytes and regions granted to the peer right now.
    std::size_t granted_bytes() const noexcept { return granted_bytes_; }
    std::size_t granted_regions() const noexcept { return grants_.size(); }
    const connection& control() const noexcept { return control_; }
    /// What it counted (connection::agent_metrics). Any thread.
    agent_counters counted() const noexcept { return tally_.read(); }

private:
    /// The access bits a grant can carry (the rest are this side's own).
    static constexpr access_flags remote_bits =
        access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic;
    struct grant {
        local_slice memory;            // keeps the memory alive while granted
        memory_region registration;    // its own MR: deregistering cuts the peer off
        std::vector<memory_region> rail_registrations;  // the same on rails 1.. (builder::rails)
        std::shared_ptr<event_listener::timer> lease_timer;
    };

    task<void> receive_loop(local_mr buffer);
    /// The peer broke the protocol (`what`): logs it, closes the data and
    /// the control connection, acts on nothing more.
    void violation(const std::string& what) noexcept;
    void on_frame(const agent_protocol::frame& f);
    void acknowledged(std::uint16_t acked);
    void count_handled();
    /// Waits until the control QP is up. Throws operation_cancelled if
    /// `token` stops first, disconnected_error if the agent is gone.
    task<void> ready(std::stop_token token, const char* call);
    /// Waits for room in the window for one counted message.
    task<void> acquire_slot(std::stop_token token, const char* call);
    /// acquire_slot within `deadline`; a timeout or stop throws what the
    /// call's caller sees, saying it was `sending` and what `outcome` is.
    task<void> acquire_slot_within(const call_deadline& deadline, const char* call, const char* sending,
                                   const char* outcome);
    /// The next value of `queue` within the call's deadline. (`call` by
    /// value: the coroutine outlives its caller's arguments.)
    template <class T>
    task<T> receive_within(waiter_queue<T>& queue, agent_call call, const char* name,
                           const char* waiting_for, const char* outcome);
    /// Sends `m` now (a counted message needs its slot first), with this
    /// side's acknowledgement in the header.
    task<void> transmit(agent_protocol::message m);
    /// acquire_slot, then transmit, in the background (no deadline: a
    /// message the protocol owes the peer).
    void send_detached(agent_protocol::message m);
    void queue_release(std::uint64_t region_id);
    void flush_releases();
    void handle(const agent_protocol::message& m);
    void on_request(const agent_protocol::request_mr& m);
    std::uint64_t add_grant(local_slice memory, access_flags access, std::chrono::milliseconds lease,
                            agent_protocol::grant_mr& out);
    void drop_grant(std::uint64_t region_id, bool tell_peer, grant_end why) noexcept;
    remote_mr to_region(const agent_protocol::grant_mr& g);
    std::chrono::milliseconds clamp_lease(std::chrono::milliseconds requested) const;
    std::exception_ptr gone() const;

    std::shared_ptr<memory_pool> pool_;
    agent_limits limits_;
    std::string peer_;
    std::string peer_host_;
    std::chrono::milliseconds call_timeout_;
    std::shared_ptr<agent_ledger> ledger_;
    connection control_;
    std::weak_ptr<connection_state> data_;
    std::shared_ptr<event_listener> event_listener_;
    bool attached_ = false;
    bool dead_ = false;
    std::string death_;
    // Closed when the control QP is attached (or the agent dies): wakes
    // every call that came first.
    std::shared_ptr<waiter_queue<bool>> ready_;

    // Flow control (docs/agent-protocol.md): one value per free slot of
    // the window; counts of counted messages sent, acknowledged by the
    // peer, handled (buffer posted again) and acknowledged to the peer.
    std::shared_ptr<waiter_queue<bool>> slots_;
    std::uint64_t sent_ = 0;
    std::uint64_t peer_acked_ = 0;
    std::uint64_t handled_ = 0;
    std::uint64_t handled_pending_ = 0;
    std::uint64_t acked_sent_ = 0;
    bool count_scheduled_ = false;

    // Drops of held regions, sent as batched release_mr messages.
    std::vector<std::uint64_t> pending_releases_;
    bool release_scheduled_ = false;

    std::uint32_t next_request_id_ = 1;
    std::uint64_t next_region_id_ = 1;
    // Regions the peer granted us, still held: their "ended" flags, set
    // when the owner's revoke_mr arrives (remote_mr::expired()).
    std::map<std::uint64_t, std::weak_ptr<std::atomic<bool>>> held_;
    std::map<std::uint32_t, std::shared_ptr<waiter_queue<agent_protocol::message>>> requests_;
    // Requests whose caller gave up (deadline, stop): a grant that still
    // arrives is released at once.
    std::set<std::uint32_t> abandoned_;
    std::map<std::uint64_t, grant> grants_;
    std::size_t granted_bytes_ = 0;
    agent_tally tally_{peer_host_};  // the process's cordma_agent_* sums

    // Regions the peer granted (send_local_mr) and handed back
    // (send_remote_mr), waiting for receive_remote_mr / receive_local_mr.
    std::shared_ptr<waiter_queue<remote_mr>> incoming_remote_;
    std::shared_ptr<waiter_queue<local_mr>> incoming_local_;

    /// One call in progress, as the stuck reports list it (stage
    /// agent_call): in its coroutine's frame, linked into calls_.
    class call_entry : public pending_entry {
    public:
        call_entry(agent& a, const char* name, std::uint64_t bytes, const char* stage) noexcept;
        /// Where it waits now.
        void at(const char* stage) noexcept { stage_ = stage; }

    private:
        void describe(std::uint64_t now_ms, pending_operation& out) const override;
        const agent* agent_;
        const char* name_;
        const char* stage_;
        std::uint64_t began_ms_;
        std::uint64_t bytes_;
    };
    pending_list calls_;
    const std::uint64_t* turn_ms_ = nullptr;
    static void collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);
    std::optional<pending_source_registration> pending_source_;  // last: leaves the reports first
};

/// The agent of a connection (null for one without: connection::adopt, a
/// peer that is not cordma).
inline std::shared_ptr<agent> agent_of(const connection_state& state) {
    return std::static_pointer_cast<agent>(state.agent);
}

}  // namespace cordma::detail
