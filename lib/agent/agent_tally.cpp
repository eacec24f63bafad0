// agent_tally.hpp: the counts, the process's list of them, and the agents'
// part of the metrics pages.
#include "agent/agent_tally.hpp"

#include <algorithm>
#include <utility>
#include <map>
#include <mutex>
#include <vector>

#include "engine/process_metrics.hpp"

namespace cordma::detail {

namespace {

// How a grant ended, as the pages name it, and its count.
const std::pair<const char*, std::uint64_t agent_counters::*> ends[grant_ends] = {
    {"released", &agent_counters::released},
    {"expired", &agent_counters::expired},
    {"revoked", &agent_counters::revoked},
    {"closed", &agent_counters::closed},
    {"unsent", &agent_counters::unsent}};

// Every field of `from` added to `to`.
void add(agent_counters& to, const agent_counters& from) {
    for (std::uint64_t agent_counters::*f :
         {&agent_counters::grants, &agent_counters::denied, &agent_counters::released, &agent_counters::expired,
          &agent_counters::revoked, &agent_counters::closed, &agent_counters::unsent, &agent_counters::received,
          &agent_counters::revoked_by_peer, &agent_counters::granted_regions, &agent_counters::granted_bytes})
        to.*f += from.*f;
}

struct sums {
    agent_counters total;                                // its granted_* gauges: live agents only
    std::map<std::string, std::uint64_t> bytes_by_host;  // granted now, live agents only
};

struct agent_list {
    std::mutex mutex;
    std::vector<const agent_tally*> live;
    agent_counters closed;  // the counts of agents gone (their gauges are 0)
};

// Never destroyed (a page may be asked for while statics are destroyed).
agent_list& agents() {
    static auto* list = new agent_list;
    return *list;
}

sums process_sums() {
    agent_list& l = agents();
    std::lock_guard lock(l.mutex);
    sums s{l.closed, {}};
    for (const agent_tally* t : l.live) {
        agent_counters c = t->read();
        add(s.total, c);
        if (c.granted_bytes != 0)
            s.bytes_by_host[t->peer_host()] += c.granted_bytes;
    }
    return s;
}

void counter_family(std::string& out, const char* name, const char* help, std::uint64_t value) {
    prometheus_family(out, name, "counter", help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
}

void prometheus(std::string& out) {
    sums all = process_sums();
    const agent_counters& s = all.total;
    counter_family(out, "cordma_agent_grants_total", "Memory regions this process's agents granted to peers.",
                   s.grants);
    counter_family(out, "cordma_agent_requests_denied_total", "Peers' requests for memory the agents refused.",
                   s.denied);
    prometheus_family(out, "cordma_agent_grants_ended_total", "counter",
                      "Grants ended, by how (released by the peer, lease expired, revoked here, connection closed, "
                      "never sent).");
    for (const auto& [reason, count] : ends)
        out += std::string("cordma_agent_grants_ended_total{reason=\"") + reason + "\"} " + std::to_string(s.*count) +
               "\n";
    prometheus_family(out, "cordma_agent_granted_regions", "gauge", "Regions granted to peers now.");
    out += "cordma_agent_granted_regions " + std::to_string(s.granted_regions) + "\n";
    prometheus_family(out, "cordma_agent_granted_bytes", "gauge",
                      "Bytes granted to peers now (registered and pinned here for them), in all and by peer host.");
    out += "cordma_agent_granted_bytes " + std::to_string(s.granted_bytes) + "\n";
    for (const auto& [host, bytes] : all.bytes_by_host)
        out += "cordma_agent_granted_bytes{host=\"" + prometheus_label(host) + "\"} " + std::to_string(bytes) + "\n";
    counter_family(out, "cordma_agent_regions_received_total", "Memory regions peers granted to this process.",
                   s.received);
    counter_family(out, "cordma_agent_revoked_by_peer_total", "Regions peers granted here and then revoked.",
                   s.revoked_by_peer);
}

void json(std::string& out) {
    sums all = process_sums();
    const agent_counters& s = all.total;
    out += "\"agents\":{\"grants\":" + std::to_string(s.grants) + ",\"denied\":" + std::to_string(s.denied) +
           ",\"ended\":{";
    for (std::size_t i = 0; i < grant_ends; ++i)
        out += std::string(i == 0 ? "" : ",") + "\"" + ends[i].first + "\":" + std::to_string(s.*ends[i].second);
    out += "},\"granted_regions\":" + std::to_string(s.granted_regions) +
           ",\"granted_bytes\":" + std::to_string(s.granted_bytes) + ",\"granted_bytes_by_host\":{";
    bool first = true;
    for (const auto& [host, bytes] : all.bytes_by_host) {
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
    agent_counters last = read();
    last.granted_regions = last.granted_bytes = 0;  // gauges: what it holds now, nothing once gone
    add(l.closed, last);
}

}  // namespace cordma::detail
