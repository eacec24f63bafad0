// process_metrics.hpp: the event listeners of the process, summed, and
// the modules' sections of the endpoint's pages.
#include "engine/process_metrics.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include <cordma/device.hpp>
#include <cordma/device_counters.hpp>

#include "core/tick_clock.hpp"
#include "engine/connection_registry.hpp"
#include "engine/event_listener_access.hpp"

namespace cordma {

namespace detail {

namespace {

struct process_list {
    std::mutex mutex;
    std::vector<event_listener*> live;
    // What the event listeners that have gone counted.
    connection_counters closed;
    std::uint64_t opened = 0;
    std::uint64_t gone = 0;
    std::array<std::uint64_t, disconnect_causes> disconnects{};
    std::array<latency_histogram, operation_kinds> latency{};
    std::vector<metrics_section> sections;
};

// Never destroyed: an event listener may go, or a page be asked for,
// while static destructors run at exit.
process_list& processes() {
    static auto* list = new process_list;
    return *list;
}

// Its connections (the registry lives as long as the listener, which
// delists itself before it goes).
const connection_registry& connections_of(event_listener* l) noexcept {
    return event_listener_access::connections(*l);
}

}  // namespace

void enlist(event_listener* listener) {
    process_list& p = processes();
    std::lock_guard lock(p.mutex);
    p.live.push_back(listener);
}

std::vector<std::shared_ptr<event_listener>> process_event_listeners() {
    process_list& p = processes();
    std::lock_guard lock(p.mutex);
    std::vector<std::shared_ptr<event_listener>> out;
    for (event_listener* l : p.live)
        if (auto kept = l->weak_from_this().lock())  // not one being destroyed
            out.push_back(std::move(kept));
    return out;
}

void delist(event_listener* listener) noexcept {
    process_list& p = processes();
    // Read before the lock: a registry's lock is never taken inside ours
    // but by snapshot below, which holds ours first (one order).
    metrics_snapshot last = connections_of(listener).snapshot();
    std::lock_guard lock(p.mutex);
    auto at = std::find(p.live.begin(), p.live.end(), listener);
    if (at == p.live.end())
        return;
    p.live.erase(at);
    p.closed += last.total();
    p.opened += last.opened;
    p.gone += last.opened;
    for (std::size_t i = 0; i < disconnect_causes; ++i)
        p.disconnects[i] += last.disconnects[i];
    for (std::size_t k = 0; k < operation_kinds; ++k)
        p.latency[k] += last.latency[k];
}

void add_device_counters(const device_context& device, std::vector<device_counters>& out) noexcept {
    for (unsigned port = 1; port <= device.attributes().phys_port_cnt; ++port) {
        try {
            out.push_back(read_device_counters(device, static_cast<std::uint8_t>(port)));
        } catch (...) {
            // No counters there (no sysfs, a device without them): left out.
        }
    }
}

void add_metrics_section(metrics_section section) {
    process_list& p = processes();
    std::lock_guard lock(p.mutex);
    p.sections.push_back(section);
}

namespace {

std::vector<metrics_section> sections() {
    process_list& p = processes();
    std::lock_guard lock(p.mutex);
    return p.sections;
}

}  // namespace

std::string process_prometheus(const prometheus_options& options) {
    std::string out = to_prometheus(process_metrics(), options);
    for (const metrics_section& s : sections())
        s.prometheus(out);
    return out;
}

std::string process_json() {
    std::string out = to_json(process_metrics());
    // to_json's object, with the sections' members added before its end.
    std::string members;
    for (const metrics_section& s : sections()) {
        std::string part;
        s.json(part);
        if (part.empty())
            continue;
        members += ',';
        members += part;
    }
    std::size_t end = out.rfind('}');
    out.insert(end, members);
    return out;
}

}  // namespace detail

metrics_snapshot process_metrics() {
    detail::process_list& p = detail::processes();
    std::unique_lock lock(p.mutex);
    metrics_snapshot out;
    out.closed = p.closed;
    out.opened = p.opened;
    out.gone = p.gone;
    out.disconnects = p.disconnects;
    out.latency = p.latency;
    for (event_listener* l : p.live) {
        metrics_snapshot one = detail::connections_of(l).snapshot();
        for (connection_metrics& c : one.connections)
            out.connections.push_back(std::move(c));
        for (shared_receive_metrics& q : one.shared_receive_queues)
            out.shared_receive_queues.push_back(std::move(q));
        out.closed += one.closed;
        out.opened += one.opened;
        out.gone += one.gone;
        for (std::size_t i = 0; i < disconnect_causes; ++i)
            out.disconnects[i] += one.disconnects[i];
        for (std::size_t k = 0; k < operation_kinds; ++k)
            out.latency[k] += one.latency[k];
    }
    for (latency_histogram& h : out.latency)
        h.ns_per_tick = detail::tick_clock::ns_per_tick();
    // Each device once, however many listeners use it; read from sysfs
    // after the lock (event listeners start and go meanwhile).
    std::vector<std::shared_ptr<device_context>> devices;
    for (event_listener* l : p.live)
        for (const auto& d : l->devices())
            if (d && std::none_of(devices.begin(), devices.end(),
                                  [&](const auto& seen) { return seen->name() == d->name(); }))
                devices.push_back(d);
    lock.unlock();
    for (const auto& d : devices)
        detail::add_device_counters(*d, out.devices);
    return out;
}

}  // namespace cordma
