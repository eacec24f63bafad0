// agent_tally.hpp: the counts, the process's list of them, and the agents'
// part of the metrics pages.
#include "agent/agent_tally.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "engine/process_metrics.hpp"

namespace cordma::detail {

namespace {

const char* const end_names[grant_ends] = {"released", "expired", "revoked", "closed", "unsent"};

struct sums {
    std::uint64_t grants = 0, denied = 0, received = 0, revoked_by_peer = 0, live_regions = 0, live_bytes = 0;
    std::array<std::uint64_t, grant_ends> ended{};
    std::map<std::string, std::uint64_t> bytes_by_host;  // granted now, live agents only
};

struct agent_list {
    std::mutex mutex;
    std::vector<const agent_tally*> live;
    sums closed;  // the counts of agents gone (their gauges are 0)
};

// Never destroyed (a page may be asked for while statics are destroyed).
agent_list& agents() {
    static auto* list = new agent_list;
    return *list;
}

void add_counts(sums& to, const agent_tally& t) {
    to.grants += t.grants.get();
    to.denied += t.denied.get();
    to.received += t.received.get();
    to.revoked_by_peer += t.revoked_by_peer.get();
    for (std::size_t i = 0; i < grant_ends; ++i)
        to.ended[i] += t.ended[i].get();
}

sums process_sums() {
    agent_list& l = agents();
    std::lock_guard lock(l.mutex);
    sums s = l.closed;
    for (const agent_tally* t : l.live) {
        add_counts(s, *t);
        std::uint64_t bytes = t->granted_bytes.get();
        s.live_bytes += bytes;
        s.live_regions += t->granted_regions.get();
        if (bytes != 0)
            s.bytes_by_host[t->peer_host()] += bytes;
    }
    return s;
}

void counter_family(std::string& out, const char* name, const char* help, std::uint64_t value) {
    prometheus_family(out, name, "counter", help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
}

void prometheus(std::string& out) {
    sums s = process_sums();
    counter_family(out, "cordma_agent_grants_total", "Memory regions this process's agents granted to peers.",
                   s.grants);
    counter_family(out, "cordma_agent_requests_denied_total", "Peers' requests for memory the agents refused.",
                   s.denied);
    prometheus_family(out, "cordma_agent_grants_ended_total", "counter",
                      "Grants ended, by how (released by the peer, lease expired, revoked here, connection closed, "
                      "never sent).");
    for (std::size_t i = 0; i < grant_ends; ++i)
        out += std::string("cordma_agent_grants_ended_total{reason=\"") + end_names[i] + "\"} " +
               std::to_string(s.ended[i]) + "\n";
    prometheus_family(out, "cordma_agent_granted_regions", "gauge", "Regions granted to peers now.");
    out += "cordma_agent_granted_regions " + std::to_string(s.live_regions) + "\n";
    prometheus_family(out, "cordma_agent_granted_bytes", "gauge",
                      "Bytes granted to peers now (registered and pinned here for them), in all and by peer host.");
    out += "cordma_agent_granted_bytes " + std::to_string(s.live_bytes) + "\n";
    for (const auto& [host, bytes] : s.bytes_by_host)
        out += "cordma_agent_granted_bytes{host=\"" + prometheus_label(host) + "\"} " + std::to_string(bytes) + "\n";
    counter_family(out, "cordma_agent_regions_received_total", "Memory regions peers granted to this process.",
                   s.received);
    counter_family(out, "cordma_agent_revoked_by_peer_total", "Regions peers granted here and then revoked.",
                   s.revoked_by_peer);
}

void json(std::string& out) {
    sums s = process_sums();
    out += "\"agents\":{\"grants\":" + std::to_string(s.grants) + ",\"denied\":" + std::to_string(s.denied) +
           ",\"ended\":{";
    for (std::size_t i = 0; i < grant_ends; ++i)
        out += std::string(i == 0 ? "" : ",") + "\"" + end_names[i] + "\":" + std::to_string(s.ended[i]);
    out += "},\"granted_regions\":" + std::to_string(s.live_regions) +
           ",\"granted_bytes\":" + std::to_string(s.live_bytes) + ",\"granted_bytes_by_host\":{";
    bool first = true;
    for (const auto& [host, bytes] : s.bytes_by_host) {
        out += first ? "" : ",";
        first = false;
        json_string(out, host);
        out += ":" + std::to_string(bytes);
    }
    out += "},\"received\":" + std::to_string(s.received) +
           ",\"revoked_by_peer\":" + std::to_string(s.revoked_by_peer) + "}";
}

}  // namespace

agent_tally::agent_tally(std::string peer_host) : peer_host_(std::move(peer_host)) {
    static std::once_flag once;
    std::call_once(once, [] { add_metrics_section({&prometheus, &json}); });
    agent_list& l = agents();
    std::lock_guard lock(l.mutex);
    l.live.push_back(this);
}

agent_tally::~agent_tally() {
    agent_list& l = agents();
    std::lock_guard lock(l.mutex);
    auto it = std::find(l.live.begin(), l.live.end(), this);
    if (it == l.live.end())
        return;
    l.live.erase(it);
    add_counts(l.closed, *this);
}

}  // namespace cordma::detail
