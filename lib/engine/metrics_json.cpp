// metrics.hpp's to_json: the snapshot as one JSON object, every counter by
// name (zeros included, so a reader never guesses a missing key).
#include <cordma/metrics.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include "engine/latency_rendering.hpp"
#include "engine/process_metrics.hpp"

namespace cordma {

void detail::json_string(std::string& out, std::string_view v) {
    out += '"';
    for (char c : v) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                out += buf;
            } else {
                out += c;
            }
        }
    }
    out += '"';
}

namespace {

void quoted(std::string& out, std::string_view v) { detail::json_string(out, v); }

void number(std::string& out, const char* key, std::uint64_t v, bool comma = true) {
    out += '"';
    out += key;
    out += "\": ";
    out += std::to_string(v);
    if (comma)
        out += ", ";
}

void counters(std::string& out, const connection_counters& c) {
    out += "{\"operations\": {";
    for (std::size_t k = 0; k < operation_kinds; ++k) {
        const operation_counters& o = c.operations[k];
        if (k != 0)
            out += ", ";
        quoted(out, name(static_cast<operation_kind>(k)));
        out += ": {";
        number(out, "posted", o.posted);
        number(out, "completed", o.completed);
        number(out, "failed", o.failed);
        number(out, "bytes", o.bytes, false);
        out += '}';
    }
    out += "}, \"completions\": {";
    for (std::size_t s = 0; s < completion_statuses; ++s) {
        if (s != 0)
            out += ", ";
        number(out, completion_status_name(s), c.completions[s], false);
    }
    out += "}, ";
    number(out, "work_requests", c.work_requests);
    number(out, "doorbells", c.doorbells);
    number(out, "signalled", c.signalled);
    number(out, "send_waits", c.send_waits);
    number(out, "recv_waits", c.recv_waits, false);
    out += '}';
}

}  // namespace

std::string to_json(const metrics_snapshot& snapshot) {
    std::string out = "{";
    number(out, "queue_pairs", snapshot.connections.size());
    number(out, "opened", snapshot.opened);
    number(out, "gone", snapshot.gone);
    out += "\"disconnects\": {";
    for (std::size_t i = 0; i < disconnect_causes; ++i)
        number(out, name(static_cast<disconnect_cause>(i)), snapshot.disconnects[i], i + 1 < disconnect_causes);
    out += "}, \"latency\": {";
    bool first_kind = true;
    for (std::size_t k = 0; k < operation_kinds; ++k) {
        if (static_cast<operation_kind>(k) == operation_kind::recv)
            continue;
        out += first_kind ? "" : ", ";
        first_kind = false;
        quoted(out, name(static_cast<operation_kind>(k)));
        out += ": ";
        detail::latency_json(out, snapshot.latency[k]);
    }
    out += "}, \"total\": ";
    counters(out, snapshot.total());
    out += ", \"closed\": ";
    counters(out, snapshot.closed);
    out += ", \"by_peer_host\": [";
    bool first = true;
    for (const auto& [host, c] : snapshot.by_peer_host()) {
        out += first ? "" : ", ";
        first = false;
        out += "{\"host\": ";
        quoted(out, host);
        out += ", \"counters\": ";
        counters(out, c);
        out += '}';
    }
    out += "], \"connections\": [";
    first = true;
    for (const connection_metrics& c : snapshot.connections) {
        out += first ? "" : ", ";
        first = false;
        out += "{\"peer\": ";
        quoted(out, c.peer);
        out += ", ";
        number(out, "qp", c.qp_num);
        out += "\"role\": ";
        quoted(out, c.role);
        out += ", \"broken\": ";
        out += c.broken ? "true" : "false";
        out += ", \"broken_reason\": ";
        quoted(out, c.broken_reason);
        if (c.broken) {
            out += ", \"cause\": ";
            quoted(out, name(c.cause));
        }
        out += ", \"counters\": ";
        counters(out, c.counters);
        out += '}';
    }
    out += "], \"shared_receive_queues\": [";
    first = true;
    for (const shared_receive_metrics& q : snapshot.shared_receive_queues) {
        out += first ? "{" : ", {";
        first = false;
        out += "\"device\": ";
        quoted(out, q.device);
        out += ", ";
        number(out, "id", q.id);
        number(out, "size", q.size);
        number(out, "buffer_size", q.buffer_size);
        number(out, "connections", q.connections);
        number(out, "ready", q.ready);
        number(out, "fewest_ready", q.fewest_ready);
        out += "\"counters\": ";
        counters(out, q.counters);
        out += '}';
    }
    out += "], \"devices\": [";
    first = true;
    for (const device_counters& d : snapshot.devices) {
        out += first ? "{" : ", {";
        first = false;
        out += "\"device\": ";
        quoted(out, d.device);
        out += ", ";
        number(out, "port", d.port);
        for (const auto* set : {&d.port_counters, &d.hw_counters}) {
            out += set == &d.port_counters ? "\"port_counters\": {" : ", \"hw_counters\": {";
            bool first_counter = true;
            for (const auto& [name, value] : *set) {
                out += first_counter ? "" : ", ";
                first_counter = false;
                quoted(out, name);
                out += ": " + std::to_string(value);
            }
            out += '}';
        }
        out += '}';
    }
    out += "]}";
    return out;
}

}  // namespace cordma
