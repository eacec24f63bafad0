// client_tally.hpp: the counts, and the process's list of them.
#include "rpc/client_tally.hpp"

#include "core/tick_clock.hpp"
#include "rpc/server_metrics_view.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace cordma::rpc::detail {

namespace {

struct client_list {
    std::mutex mutex;
    std::vector<const client_tally*> live;
    client_metrics closed;
};

// Never destroyed (a page may be asked for while statics are destroyed).
client_list& clients() {
    static auto* list = new client_list;
    return *list;
}

void add(client_metrics& to, const client_metrics& m) {
    to.calls += m.calls;
    to.answered += m.answered;
    for (std::size_t i = 0; i < to.errors.size(); ++i)
        to.errors[i] += m.errors[i];
    to.latency += m.latency;
}

}  // namespace

client_tally::client_tally() {
    add_rpc_metrics_section();
    client_list& l = clients();
    std::lock_guard lock(l.mutex);
    l.live.push_back(this);
}

client_tally::~client_tally() {
    client_list& l = clients();
    client_metrics last = read();
    std::lock_guard lock(l.mutex);
    auto it = std::find(l.live.begin(), l.live.end(), this);
    if (it == l.live.end())
        return;
    l.live.erase(it);
    add(l.closed, last);
}

client_metrics client_tally::read() const noexcept {
    client_metrics m;
    // The ends first: a call that ends between the reads shows in flight,
    // never as more ended than made.
    m.answered = answered.get();
    for (std::size_t i = 0; i < errors.size(); ++i)
        m.errors[i] = errors[i].get();
    m.calls = calls.get();
    m.latency = latency.read(cordma::detail::tick_clock::ns_per_tick());
    return m;
}

client_metrics client_tally::process_total() {
    client_list& l = clients();
    std::lock_guard lock(l.mutex);
    client_metrics total = l.closed;
    for (const client_tally* t : l.live)
        add(total, t->read());
    total.latency.ns_per_tick = cordma::detail::tick_clock::ns_per_tick();
    return total;
}

}  // namespace cordma::rpc::detail
