// The memory-region agent's calls on a connection (declared in
// <cordma/connection.hpp>): argument checks, then the agent does the work
// on the event listener thread.
#include <cordma/connection.hpp>

#include <stdexcept>

#include "agent/agent.hpp"
#include "engine/connection_state.hpp"

namespace cordma {

bool connection::has_agent() const { return checked_state("has_agent").agent != nullptr; }

std::shared_ptr<detail::agent> connection::agent_for(const char* call) const {
    if (!checked_state(call).agent)
        throw std::logic_error(std::string("connection::") + call + " to " + peer() +
                               ": this connection has no agent (a plain RC connection: its builder had "
                               "builder::agent(false), or it was made with connection::adopt). To get one, connect "
                               "and listen with the agent on (builder::agent(true), the default) on both sides, "
                               "with cordma at both ends; connect_loopback pairs have one too");
    return detail::agent_of(*state_);
}

agent_counters connection::agent_metrics() const { return agent_for("agent_metrics")->counted(); }

namespace {

void check_call(const char* call, const agent_call& how, const std::string& peer) {
    if (how.timeout.count() < 0)
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer + ": agent_call::timeout " +
                                    std::to_string(how.timeout.count()) +
                                    " ms is negative (0 for the builder's agent_timeout, agent_call::forever for none)");
}

}  // namespace

task<remote_mr> connection::request_remote_mr(std::size_t size, std::size_t alignment,
                                                  std::chrono::milliseconds lease, access_flags access,
                                              agent_call call) {
    if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
        throw std::invalid_argument("connection::request_remote_mr(size=" + std::to_string(size) + ", alignment=" +
                                    std::to_string(alignment) + ") to " + peer() +
                                    ": size must be nonzero and alignment a power of two <= 4096");
    auto a = agent_for("request_remote_mr");
    check_call("request_remote_mr", call, peer());
    co_await state_->event_listener()->schedule();
    co_return co_await a->request_remote_mr(size, alignment, lease, access, std::move(call));
}

task<void> connection::send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access,
                                     agent_call call) {
    if (!region.block())
        throw std::invalid_argument("connection::send_local_mr to " + peer() + ": an empty local_slice");
    auto a = agent_for("send_local_mr");
    check_call("send_local_mr", call, peer());
    co_await state_->event_listener()->schedule();
    co_await a->send_local_mr(std::move(region), lease, access, std::move(call));
}

task<remote_mr> connection::receive_remote_mr(agent_call call) {
    auto a = agent_for("receive_remote_mr");
    check_call("receive_remote_mr", call, peer());
    co_await state_->event_listener()->schedule();
    co_return co_await a->receive_remote_mr(std::move(call));
}

task<void> connection::send_remote_mr(remote_mr region, agent_call call) {
    auto a = agent_for("send_remote_mr");
    check_call("send_remote_mr", call, peer());
    co_await state_->event_listener()->schedule();
    co_await a->send_remote_mr(std::move(region), std::move(call));
}

task<local_mr> connection::receive_local_mr(agent_call call) {
    auto a = agent_for("receive_local_mr");
    check_call("receive_local_mr", call, peer());
    co_await state_->event_listener()->schedule();
    co_return co_await a->receive_local_mr(std::move(call));
}

task<std::size_t> connection::revoke_local_mr(local_slice region) {
    auto a = agent_for("revoke_local_mr");
    co_await state_->event_listener()->schedule();
    co_return co_await a->revoke(std::move(region));
}

}  // namespace cordma
