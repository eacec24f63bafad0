// metrics.hpp's to_prometheus: the snapshot in Prometheus' text exposition
// format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/):
// one family per counter, its HELP and TYPE first and its samples together;
// totals as cordma_*, per peer host as cordma_peer_*{host}, per queue pair
// as cordma_qp_*{peer,qp,role}.
#include <cordma/metrics.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "engine/latency_rendering.hpp"
#include "engine/process_metrics.hpp"

namespace cordma {

// A label value, escaped as the format asks (backslash, quote, newline).
std::string detail::prometheus_label(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

void detail::prometheus_family(std::string& out, std::string_view name, std::string_view type,
                               std::string_view help) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
    out.append(type).append("\n");
}

namespace {

std::string escaped(std::string_view v) { return detail::prometheus_label(v); }

// One sample: name{labels[,extra]} value.
void sample(std::string& out, const std::string& name, const std::string& labels, const std::string& extra,
            std::uint64_t value) {
    detail::prometheus_line(out, name, labels, extra, std::to_string(value));
}

using emit = std::function<void(const std::string& extra, std::uint64_t value)>;

struct family {
    const char* name;  // after the scope's prefix, with its _total
    const char* help;
    void (*samples)(const connection_counters& c, const emit& e);
};

void by_kind(const connection_counters& c, const emit& e, std::uint64_t operation_counters::*field) {
    for (std::size_t k = 0; k < operation_kinds; ++k)
        e(std::string("kind=\"") + name(static_cast<operation_kind>(k)) + "\"", c.operations[k].*field);
}

const family families[] = {
    {"operations_posted_total", "Work requests posted, by operation kind (recv: receives posted).",
     [](const connection_counters& c, const emit& e) { by_kind(c, e, &operation_counters::posted); }},
    {"operations_completed_total", "Operations finished successfully, by kind (recv: messages delivered).",
     [](const connection_counters& c, const emit& e) { by_kind(c, e, &operation_counters::completed); }},
    {"operations_failed_total",
     "Operations finished with an error (a failed or flushed completion, a cancellation, a refusal), by kind.",
     [](const connection_counters& c, const emit& e) { by_kind(c, e, &operation_counters::failed); }},
    {"operation_bytes_total",
     "Bytes of the requests posted (send, write, read; 8 an atomic) and of the messages received, by kind.",
     [](const connection_counters& c, const emit& e) { by_kind(c, e, &operation_counters::bytes); }},
    {"completions_total", "Work completions reaped from the device, by status (those never seen are left out).",
     [](const connection_counters& c, const emit& e) {
         for (std::size_t s = 0; s < completion_statuses; ++s)
             if (s == 0 || c.completions[s] != 0)
                 e(std::string("status=\"") + completion_status_name(s) + "\"", c.completions[s]);
     }},
    {"work_requests_total", "Send-queue work requests posted.",
     [](const connection_counters& c, const emit& e) { e("", c.work_requests); }},
    {"doorbells_total", "ibv_post_send calls (a chain of requests rings one).",
     [](const connection_counters& c, const emit& e) { e("", c.doorbells); }},
    {"signalled_requests_total", "Send-queue work requests that asked for a completion.",
     [](const connection_counters& c, const emit& e) { e("", c.signalled); }},
    {"send_queue_waits_total", "Operations that found the send queue full and waited for room.",
     [](const connection_counters& c, const emit& e) { e("", c.send_waits); }},
    {"receive_queue_waits_total", "Receives that found the receive queue full and waited for room.",
     [](const connection_counters& c, const emit& e) { e("", c.recv_waits); }},
};

struct scope {
    std::string labels;
    const connection_counters* counters;
};

void render(std::string& out, const char* prefix, const char* what, const std::vector<scope>& scopes) {
    if (scopes.empty())
        return;
    for (const family& f : families) {
        std::string name = std::string("cordma_") + prefix + f.name;
        detail::prometheus_family(out, name, "counter", std::string(f.help) + " " + what);
        for (const scope& s : scopes)
            f.samples(*s.counters,
                      [&](const std::string& extra, std::uint64_t value) { sample(out, name, s.labels, extra, value); });
    }
}

// One series per live shared receive queue, labelled device and srq (its
// id): few in a process, so always rendered.
void render_receive_queues(std::string& out, const std::vector<shared_receive_metrics>& queues) {
    if (queues.empty())
        return;
    static const detail::value_family<shared_receive_metrics> families[] = {
        {"cordma_srq_size", "gauge", "Receives a shared receive queue holds.",
         [](const shared_receive_metrics& q) { return q.size; }},
        {"cordma_srq_connections", "gauge", "Connections receiving through the shared receive queue now.",
         [](const shared_receive_metrics& q) { return q.connections; }},
        {"cordma_srq_receives_ready", "gauge", "Receives posted now, waiting for a message.",
         [](const shared_receive_metrics& q) { return q.ready; }},
        {"cordma_srq_receives_fewest_ready", "gauge",
         "The fewest receives posted since the queue opened, as the event loop saw them (0: it ran dry).",
         [](const shared_receive_metrics& q) { return q.fewest_ready; }},
        {"cordma_srq_messages_total", "counter", "Messages delivered through the shared receive queue.",
         [](const shared_receive_metrics& q) { return q.counters[operation_kind::recv].completed; }},
        {"cordma_srq_message_bytes_total", "counter", "Bytes of the messages delivered through it.",
         [](const shared_receive_metrics& q) { return q.counters[operation_kind::recv].bytes; }},
        {"cordma_srq_receives_failed_total", "counter",
         "Its receives that completed with an error (a message longer than its buffers, a flush).",
         [](const shared_receive_metrics& q) { return q.counters[operation_kind::recv].failed; }},
    };
    std::vector<std::pair<std::string, const shared_receive_metrics*>> items;
    for (const shared_receive_metrics& q : queues)
        items.emplace_back("device=\"" + escaped(q.device) + "\",srq=\"" + std::to_string(q.id) + "\"", &q);
    detail::prometheus_table(out, families, items);
}

// The devices' own counters, as the kernel gives them: one family, a
// series per device, port and counter (port counters and the driver's
// alike; a name in both is the driver's, as device_counters::operator[]).
void render_devices(std::string& out, const std::vector<device_counters>& devices) {
    if (devices.empty())
        return;
    const char* family = "cordma_device_events_total";
    detail::prometheus_family(out, family, "counter",
                              "The device's own counters (sysfs ports/<port>/counters and hw_counters), by device, "
                              "port and counter, as the kernel gives them (port_xmit_data and port_rcv_data in 4-byte "
                              "words).");
    for (const device_counters& d : devices) {
        const std::string labels = "device=\"" + escaped(d.device) + "\",port=\"" + std::to_string(d.port) + "\"";
        for (const auto& [name, value] : d.hw_counters)
            sample(out, family, labels, "counter=\"" + escaped(name) + "\"", value);
        for (const auto& [name, value] : d.port_counters)
            if (!d.hw_counters.contains(name))
                sample(out, family, labels, "counter=\"" + escaped(name) + "\"", value);
    }
}

}  // namespace

std::string to_prometheus(const metrics_snapshot& snapshot, const prometheus_options& options) {
    std::string out;
    std::uint64_t broken = 0;
    for (const connection_metrics& c : snapshot.connections)
        broken += c.broken ? 1 : 0;
    detail::prometheus_family(out, "cordma_queue_pairs", "gauge",
                              "Queue pairs live now (a connection with the agent has two).");
    sample(out, "cordma_queue_pairs", "", "", snapshot.connections.size());
    detail::prometheus_family(out, "cordma_queue_pairs_broken", "gauge",
                              "Live queue pairs whose connection broke (not yet closed).");
    sample(out, "cordma_queue_pairs_broken", "", "", broken);
    detail::prometheus_family(out, "cordma_queue_pairs_opened_total", "counter", "Queue pairs opened.");
    sample(out, "cordma_queue_pairs_opened_total", "", "", snapshot.opened);
    detail::prometheus_family(out, "cordma_queue_pairs_closed_total", "counter",
                              "Queue pairs closed (their counts stay in the totals).");
    sample(out, "cordma_queue_pairs_closed_total", "", "", snapshot.gone);
    detail::prometheus_family(out, "cordma_disconnects_total", "counter",
                              "Queue pairs whose connection ended, by cause (closed_here, peer_closed, "
                              "failed_completion, other).");
    for (std::size_t i = 0; i < disconnect_causes; ++i)
        sample(out, "cordma_disconnects_total", "",
               std::string("cause=\"") + name(static_cast<disconnect_cause>(i)) + "\"", snapshot.disconnects[i]);

    connection_counters total = snapshot.total();
    render(out, "", "All queue pairs, closed ones included.", {scope{"", &total}});
    std::vector<detail::labelled_histogram> latencies;
    for (std::size_t k = 0; k < operation_kinds; ++k)
        if (static_cast<operation_kind>(k) != operation_kind::recv)
            latencies.emplace_back(std::string("kind=\"") + name(static_cast<operation_kind>(k)) + "\"",
                                   &snapshot.latency[k]);
    detail::prometheus_summary(out, "cordma_operation_latency_seconds",
                               "How long operations took, from the loop turn that started one to the one that saw "
                               "it complete, by kind (successful ones; receives are not timed).",
                               latencies);
    render_receive_queues(out, snapshot.shared_receive_queues);
    render_devices(out, snapshot.devices);
    if (options.peer_hosts) {
        auto hosts = snapshot.by_peer_host();
        std::vector<scope> scopes;
        for (const auto& [host, counters] : hosts)
            scopes.push_back({"host=\"" + escaped(host) + "\"", &counters});
        render(out, "peer_", "Live queue pairs, by peer host.", scopes);
    }
    if (options.connections) {
        std::vector<scope> scopes;
        for (const connection_metrics& c : snapshot.connections)
            scopes.push_back({"peer=\"" + escaped(c.peer) + "\",qp=\"" + std::to_string(c.qp_num) + "\",role=\"" +
                                  escaped(c.role) + "\"",
                              &c.counters});
        render(out, "qp_", "By live queue pair.", scopes);
        detail::prometheus_family(out, "cordma_qp_broken", "gauge",
                                  "Whether the live queue pair's connection broke (1) or is up (0).");
        for (std::size_t i = 0; i < scopes.size(); ++i)
            sample(out, "cordma_qp_broken", scopes[i].labels, "", snapshot.connections[i].broken ? 1 : 0);
    }
    return out;
}

}  // namespace cordma
