// group_tally.hpp: the counts, the process's list of them, and the
// groups' part of the metrics pages.
#include "group/group_tally.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/tick_clock.hpp"
#include "engine/latency_rendering.hpp"
#include "engine/process_metrics.hpp"

namespace cordma::detail {

namespace {

struct group_list {
    std::mutex mutex;
    std::vector<const group_tally*> live;
    group_metrics closed;
};

// Never destroyed (a page may be asked for while statics are destroyed).
group_list& groups() {
    static auto* list = new group_list;
    return *list;
}

group_metrics named() {
    group_metrics m;
    for (std::size_t k = 0; k < m.collectives.size(); ++k)
        m.collectives[k].kind = collective_name(static_cast<collective>(k + 1));
    return m;
}

void add(group_metrics& to, const group_metrics& m) {
    for (std::size_t k = 0; k < to.collectives.size(); ++k) {
        collective_metrics& t = to.collectives[k];
        const collective_metrics& f = m.collectives[k];
        t.calls += f.calls;
        t.completed += f.completed;
        t.failed += f.failed;
        t.latency += f.latency;
    }
}

void prometheus(std::string& out) {
    std::uint64_t open = 0;
    group_metrics m = group_tally::process_total(&open);
    prometheus_family(out, "cordma_groups", "gauge", "Groups (cordma::group) live now in this process.");
    out += "cordma_groups " + std::to_string(open) + "\n";
    auto counts = [&](const char* name, const char* help, std::uint64_t collective_metrics::*field) {
        prometheus_family(out, name, "counter", help);
        for (const collective_metrics& c : m.collectives)
            out += std::string(name) + "{kind=\"" + c.kind + "\"} " + std::to_string(c.*field) + "\n";
    };
    counts("cordma_group_collectives_total", "Collectives called on this process's ranks, by kind.",
           &collective_metrics::calls);
    counts("cordma_group_collectives_completed_total", "Collectives that returned, by kind.",
           &collective_metrics::completed);
    counts("cordma_group_collectives_failed_total", "Collectives that threw, by kind.", &collective_metrics::failed);
    std::vector<labelled_histogram> latencies;
    for (const collective_metrics& c : m.collectives)
        latencies.emplace_back(std::string("kind=\"") + c.kind + "\"", &c.latency);
    prometheus_summary(out, "cordma_group_collective_latency_seconds",
                       "How long completed collectives took on this process's ranks, from the loop turn that started "
                       "one to the one that finished it, by kind.",
                       latencies);
}

void json(std::string& out) {
    std::uint64_t open = 0;
    group_metrics m = group_tally::process_total(&open);
    out += "\"groups\":{\"open\":" + std::to_string(open) + ",\"collectives\":{";
    for (std::size_t k = 0; k < m.collectives.size(); ++k) {
        const collective_metrics& c = m.collectives[k];
        out += std::string(k == 0 ? "" : ",") + "\"" + c.kind + "\":{\"calls\":" + std::to_string(c.calls) +
               ",\"completed\":" + std::to_string(c.completed) + ",\"failed\":" + std::to_string(c.failed) +
               ",\"latency\":";
        latency_json(out, c.latency);
        out += "}";
    }
    out += "}}";
}

}  // namespace

group_tally::group_tally() {
    static std::once_flag once;
    std::call_once(once, [] {
        groups().closed = named();
        add_metrics_section({&prometheus, &json});
    });
    group_list& l = groups();
    std::lock_guard lock(l.mutex);
    l.live.push_back(this);
}

group_tally::~group_tally() {
    group_list& l = groups();
    group_metrics last = read();
    std::lock_guard lock(l.mutex);
    auto it = std::find(l.live.begin(), l.live.end(), this);
    if (it == l.live.end())
        return;
    l.live.erase(it);
    add(l.closed, last);
}

group_metrics group_tally::read() const noexcept {
    group_metrics m = named();
    double ns_per_tick = tick_clock::ns_per_tick();
    for (std::size_t k = 0; k < kinds_.size(); ++k) {
        collective_metrics& c = m.collectives[k];
        // The ends first: a call ending between the reads shows as not yet
        // ended, never as more ended than made.
        c.completed = kinds_[k].completed.get();
        c.failed = kinds_[k].failed.get();
        c.calls = kinds_[k].calls.get();
        c.latency = kinds_[k].latency.read(ns_per_tick);
    }
    return m;
}

group_metrics group_tally::process_total(std::uint64_t* open) {
    group_list& l = groups();
    std::lock_guard lock(l.mutex);
    group_metrics total = l.closed;
    for (const group_tally* t : l.live)
        add(total, t->read());
    for (collective_metrics& c : total.collectives)
        c.latency.ns_per_tick = tick_clock::ns_per_tick();
    *open = l.live.size();
    return total;
}

}  // namespace cordma::detail
