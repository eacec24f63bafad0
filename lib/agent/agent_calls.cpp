// The memory-region agent, this side's calls: asking the peer for memory,
// granting it some, receiving and handing back regions, revoking grants,
// each within its deadline (agent_call, builder::agent_timeout) and stop
// token.
#include "agent/agent.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <system_error>

#include <cordma/error.hpp>
#include "agent/call_deadline.hpp"

namespace cordma {

namespace detail {

namespace proto = agent_protocol;

namespace {
constexpr const char* waiting_for_room = "waiting for room in the agents' window";
}  // namespace

agent::call_entry::call_entry(agent& a, const char* name, std::uint64_t bytes, const char* stage) noexcept
    : pending_entry(a.calls_), agent_(&a), name_(name), stage_(stage),
      began_ms_(a.turn_ms_ != nullptr ? *a.turn_ms_ : 0), bytes_(bytes) {}

void agent::call_entry::describe(std::uint64_t now_ms, pending_operation& p) const {
    p.peer = agent_->peer_;
    p.qp_num = agent_->control_ ? agent_->control_.qp()->qp_num() : 0;
    p.role = "agent";
    p.stage = pending_stage::agent_call;
    p.age = age_of(now_ms, began_ms_);
    p.bytes = bytes_;
    // Before the agent's queue pair is up, a call waits for it to connect.
    p.what = std::string(name_) + ", " +
             (!agent_->attached_ && stage_ == waiting_for_room ? "waiting for the agent's queue pair to connect"
                                                                : stage_);
}

void agent::collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out) {
    static_cast<const agent*>(self)->calls_.collect(now_ms, out);
}

task<remote_mr> agent::request_remote_mr(std::size_t size, std::size_t alignment, std::chrono::milliseconds lease,
                                         access_flags access, agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "request_remote_mr";
    std::string what = std::string(name) + "(size=" + std::to_string(size) + ")";
    if ((access & remote_bits) == access_flags::none)
        throw std::invalid_argument(what + " from " + peer_ +
                                    ": access must include remote_read, remote_write or remote_atomic");
    call_deadline deadline(*event_listener_, call, call_timeout_);
    call_entry entry(*this, name, size, waiting_for_room);
    co_await acquire_slot_within(deadline, name, "the request", "Nothing was sent; the connection stays up.");
    entry.at("waiting for the peer's answer");
    std::uint32_t id = next_request_id_++;
    if (next_request_id_ == 0)
        next_request_id_ = 1;  // 0 on the wire means "unsolicited"
    auto answer = waiter_queue<proto::message>::make(event_listener_);
    requests_.emplace(id, answer);
    proto::request_mr req{id, size, static_cast<std::uint32_t>(alignment),
                          static_cast<std::uint32_t>(std::clamp<long long>(lease.count(), 0, UINT32_MAX)),
                          static_cast<std::uint32_t>(to_verbs(access & remote_bits))};
    std::optional<proto::message> reply;
    std::stop_token token = deadline.token();
    try {
        co_await transmit(req);
        reply = co_await answer->pop(token, name, peer_);
    } catch (const operation_cancelled&) {
        requests_.erase(id);
        abandoned_.insert(id);
        deadline.fail(name, peer_, "waiting for the peer's answer",
                      "The connection stays up; a grant that arrives later is released at once.");
    } catch (...) {
        requests_.erase(id);
        throw;
    }
    if (!reply)
        std::rethrow_exception(gone());
    if (auto* deny = std::get_if<proto::deny_mr>(&*reply))
        throw std::system_error(std::make_error_code(static_cast<std::errc>(deny->code)),
                                what + " from " + peer_ + ": refused: " + deny->reason);
    co_return to_region(std::get<proto::grant_mr>(*reply));
}

task<void> agent::send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access,
                                agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "send_local_mr";
    if ((access & remote_bits) == access_flags::none)
        throw std::invalid_argument("send_local_mr to " + peer_ +
                                    ": access must include remote_read, remote_write or remote_atomic");
    // Never more than the region allows, nor than this side lets peers have.
    access_flags granted = access & region.block()->access & limits_.allowed_access & remote_bits;
    if (granted == access_flags::none)
        throw std::invalid_argument("send_local_mr to " + peer_ + ": nothing left to grant: asked " +
                                    to_string(access & remote_bits) + ", the region allows " +
                                    to_string(region.block()->access & remote_bits) +
                                    ", agent_limits::allowed_access (with builder::remote_access) allows " +
                                    to_string(limits_.allowed_access & remote_bits));
    call_deadline deadline(*event_listener_, call, call_timeout_);
    call_entry entry(*this, name, region.size(), waiting_for_room);
    co_await acquire_slot_within(deadline, name, "the grant", "Nothing was granted; the connection stays up.");
    entry.at("sending the grant");
    proto::grant_mr g;
    std::uint64_t id = add_grant(std::move(region), granted, lease, g);
    try {
        co_await transmit(g);
    } catch (...) {
        drop_grant(id, false, grant_end::unsent);
        throw;
    }
}

template <class T>
task<T> agent::receive_within(waiter_queue<T>& queue, agent_call call, const char* name,
                              const char* waiting_for, const char* outcome) {
    auto self = shared_from_this();
    call_deadline deadline(*event_listener_, call, call_timeout_);
    call_entry entry(*this, name, 0, waiting_for);
    std::stop_token token = deadline.token();
    std::optional<T> r;
    try {
        r = co_await queue.pop(token, name, peer_);
    } catch (const operation_cancelled&) {
        deadline.fail(name, peer_, waiting_for, outcome);
    }
    if (!r)
        std::rethrow_exception(gone());
    co_return std::move(*r);
}

task<void> agent::acquire_slot_within(const call_deadline& deadline, const char* name, const char* message,
                                      const char* outcome) {
    std::stop_token token = deadline.token();
    try {
        co_await acquire_slot(token, name);
    } catch (const operation_cancelled&) {
        deadline.fail(name, peer_,
                      std::string("waiting to send ") + message + " (the peer's agent has not read this side's last " +
                          std::to_string(proto::window) + " messages)",
                      outcome);
    }
}

task<remote_mr> agent::receive_remote_mr(agent_call call) {
    return receive_within(*incoming_remote_, call, "receive_remote_mr",
                          "waiting for the peer to grant a region (send_local_mr)",
                          "The connection stays up; a region that arrives later goes to the next receive_remote_mr.");
}

task<void> agent::send_remote_mr(remote_mr region, agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "send_remote_mr";
    if (!region)
        throw std::invalid_argument("send_remote_mr to " + peer_ + ": an empty remote_mr (moved from?)");
    call_deadline deadline(*event_listener_, call, call_timeout_);
    call_entry entry(*this, name, region.size(), waiting_for_room);
    co_await acquire_slot_within(deadline, name, "the hand-back", "The region is released instead; the connection stays up.");
    entry.at("sending the hand-back");
    if (region.expired()) {
        slots_->push(true);  // the slot goes unused
        throw std::system_error(std::make_error_code(std::errc::timed_out),
                                "send_remote_mr to " + peer_ + ": region " + std::to_string(region.id()) +
                                    " cannot be handed back: the owner ended the grant (its lease expired, or it "
                                    "was revoked) and has freed it already; the connection is fine");
    }
    std::uint64_t id = region.disown();
    held_.erase(id);
    co_await transmit(proto::return_mr{id});
}

task<local_mr> agent::receive_local_mr(agent_call call) {
    return receive_within(*incoming_local_, call, "receive_local_mr",
                          "waiting for the peer to hand a region back (send_remote_mr)",
                          "The connection stays up; a region that comes back later goes to the next receive_local_mr.");
}

task<std::size_t> agent::revoke(local_slice region) {
    auto self = shared_from_this();
    std::vector<std::uint64_t> ids;
    for (auto& [id, g] : grants_)
        if (g.memory.data() < region.data() + region.size() && region.data() < g.memory.data() + g.memory.size())
            ids.push_back(id);
    for (auto id : ids)
        drop_grant(id, true, grant_end::revoked);
    co_return ids.size();
}

}  // namespace detail

}  // namespace cordma
