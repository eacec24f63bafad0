#include "connect/assemble.hpp"

#include "agent/agent.hpp"
#include "connect/qp_settings.hpp"
#include "connect/runtime.hpp"
#include "engine/connection_state.hpp"
#include "engine/transport.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

static_assert(control_capacity.max_recv_wr >= agent_protocol::receive_depth,
              "the control QP must hold every receive the agent keeps posted");
static_assert(control_capacity.max_send_wr >= agent_protocol::window + 2,
              "the control QP's send queue must hold a full window and the acks");

connection_parts parts_for(const runtime& rt, const connection_settings& settings, std::shared_ptr<queue_pair> data,
                           std::string peer, std::shared_ptr<transport> watcher, bool with_agent) {
    connection_parts parts;
    parts.event_listener = rt.event_listener;
    parts.data = std::move(data);
    parts.peer = std::move(peer);
    parts.results_pool = rt.results_pool;
    parts.watcher = std::move(watcher);
    parts.shared_receives = settings.shared_receives;
    if (with_agent) {
        parts.agent_pool = rt.pool;
        parts.limits = agent_limits_for(settings);
        parts.agent_timeout = settings.agent_timeout;
        parts.ledger = rt.ledger;
    }
    return parts;
}

connection assemble(connection_parts parts) {
    auto state = std::make_shared<connection_state>(parts.event_listener, std::move(parts.data), parts.peer,
                                                    parts.results_pool);
    if (parts.watcher)
        state->set_transport(std::move(parts.watcher));
    if (parts.agent_pool)
        state->agent = std::make_shared<agent>(parts.event_listener, std::move(parts.agent_pool), parts.limits,
                                               parts.peer, parts.agent_timeout, std::move(parts.ledger));
    state->reopen = std::move(parts.reopen);
    state->peer_private_data = std::move(parts.peer_private_data);
    if (parts.shared_receives)
        state->attach_shared_receives(std::move(parts.shared_receives));
    logf(log_level::debug, "cordma: connection to %s (QP %u) set up%s", state->peer().c_str(), state->qp()->qp_num(),
         state->agent ? ", with the agent" : "");
    return connection_access::make(std::move(state));
}

void attach_control(const connection& conn, std::shared_ptr<queue_pair> control,
                    std::shared_ptr<transport> watcher) {
    const auto& state = connection_access::state(conn);
    auto channel = std::make_shared<connection_state>(state->event_listener(), std::move(control),
                                                      state->peer() + " (agent)", state->results_pool(), "agent");
    if (watcher)
        channel->set_transport(std::move(watcher));
    agent_of(*state)->attach(connection_access::make(std::move(channel)), state);
}

void attach_rails(const connection& conn, std::vector<std::shared_ptr<queue_pair>> rails,
                  std::size_t stripe_threshold) {
    const auto& state = connection_access::state(conn);
    std::vector<std::shared_ptr<connection_state>> states;
    for (std::size_t i = 0; i < rails.size(); ++i)
        states.push_back(std::make_shared<connection_state>(state->event_listener(), std::move(rails[i]),
                                                            state->peer() + " (rail " + std::to_string(i + 1) + ")",
                                                            state->results_pool(), "rail"));
    state->attach_rails(std::move(states), stripe_threshold);
    logf(log_level::debug, "cordma: connection to %s striped over %zu rails from %zu bytes", state->peer().c_str(),
         rails.size() + 1, stripe_threshold);
}

void fail_control(const connection& conn, const std::string& why) noexcept {
    const auto& state = connection_access::state(conn);
    if (state->agent)
        state->agent->shut_down(why);
}

}  // namespace cordma::detail
