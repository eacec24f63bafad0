#include "engine/connection_registry.hpp"

#include <algorithm>

#include "core/tick_clock.hpp"
#include "engine/connection_state.hpp"
#include "engine/shared_receive_state.hpp"

namespace cordma::detail {

void connection_registry::add(const connection_state* state) {
    std::lock_guard lock(mutex_);
    live_.push_back({state, false, {}});
    ++opened_;
}

void connection_registry::remove(const connection_state* state) noexcept {
    connection_counters last = state->tally().read();
    std::lock_guard lock(mutex_);
    auto it = std::find_if(live_.begin(), live_.end(), [&](const entry& e) { return e.state == state; });
    if (it == live_.end())
        return;
    live_.erase(it);
    closed_ += last;
    ++gone_;
}

void connection_registry::note_broken(const connection_state* state, const std::string& why,
                                      disconnect_cause cause, bool counted) {
    std::lock_guard lock(mutex_);
    for (entry& e : live_)
        if (e.state == state && !e.broken) {
            e.broken = true;
            e.reason = why;
            e.cause = cause;
            if (counted)
                ++disconnects_[static_cast<std::size_t>(cause)];
        }
}

void connection_registry::add_receive_queue(const shared_receive_state* queue) {
    std::lock_guard lock(mutex_);
    receive_queues_.push_back(queue);
}

void connection_registry::remove_receive_queue(const shared_receive_state* queue) noexcept {
    std::lock_guard lock(mutex_);
    auto it = std::find(receive_queues_.begin(), receive_queues_.end(), queue);
    if (it == receive_queues_.end())
        return;
    closed_ += queue->counted();  // under the lock: no snapshot sees it twice or not at all
    receive_queues_.erase(it);
}

metrics_snapshot connection_registry::snapshot() const {
    metrics_snapshot m;
    std::lock_guard lock(mutex_);
    m.connections.reserve(live_.size());
    for (const entry& e : live_)
        m.connections.push_back({e.state->peer(), e.state->qp()->qp_num(), e.state->role(), e.broken, e.reason,
                                 e.cause, e.state->tally().read()});
    m.shared_receive_queues.reserve(receive_queues_.size());
    for (const shared_receive_state* q : receive_queues_)
        m.shared_receive_queues.push_back(q->metrics());
    m.closed = closed_;
    m.disconnects = disconnects_;
    m.opened = opened_;
    m.gone = gone_;
    double ns_per_tick = tick_clock::ns_per_tick();
    for (std::size_t k = 0; k < operation_kinds; ++k) {
        m.latency[k] = latency_[k].read(ns_per_tick);
        if (latency_base_)
            m.latency[k] -= (*latency_base_)[k];
    }
    return m;
}

void connection_registry::reset_latency() {
    std::lock_guard lock(mutex_);
    if (!latency_base_)
        latency_base_ = std::make_unique<std::array<latency_histogram, operation_kinds>>();
    for (std::size_t k = 0; k < operation_kinds; ++k)
        (*latency_base_)[k] = latency_[k].read(1.0);
}

void connection_registry::collect_pending(std::uint64_t now_ms, std::vector<pending_operation>& out) const {
    std::lock_guard lock(mutex_);
    for (const entry& e : live_)
        e.state->collect_pending(now_ms, out);
    for (const pending_source& s : sources_)
        s.collect(s.self, now_ms, out);
}

void connection_registry::add_source(pending_source source) {
    std::lock_guard lock(mutex_);
    sources_.push_back(source);
}

void connection_registry::remove_source(const void* self) noexcept {
    std::lock_guard lock(mutex_);
    std::erase_if(sources_, [&](const pending_source& s) { return s.self == self; });
}

}  // namespace cordma::detail
