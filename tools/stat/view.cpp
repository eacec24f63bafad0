// view.hpp: totals, rates and the tables cordma-stat prints.
#include "view.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <map>
#include <tuple>

namespace cordma_stat {

namespace {

const char* const kinds[] = {"send", "send_with_imm", "write", "write_with_imm", "read", "fetch_add", "compare_swap",
                             "recv"};

// Sums of the samples named `name` whose labels include `match`, keyed by
// the values of `key` (or "" for all together).
using sums = std::map<std::string, double>;

// Whether `s` carries every label of `match` with its value.
bool matches(const sample& s, const std::map<std::string, std::string>& match) {
    for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v)
            return false;
    }
    return true;
}

sums by(const reading& r, const std::string& name, const std::string& key,
        const std::map<std::string, std::string>& match = {}) {
    sums out;
    for (const sample& s : r.samples) {
        if (s.name != name || !matches(s, match))
            continue;
        std::string k;
        if (!key.empty()) {
            auto it = s.labels.find(key);
            k = it == s.labels.end() ? "" : it->second;
        }
        out[k] += s.value;
    }
    return out;
}

double one(const reading& r, const std::string& name, const std::map<std::string, std::string>& match = {}) {
    return by(r, name, "", match)[""];
}

std::string line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* format, ...) {
    char buf[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(buf, sizeof buf, format, args);
    va_end(args);
    return std::string(buf) + "\n";
}

// A queue pair's series key: peer, qp, role.
using qp_key = std::tuple<std::string, std::string, std::string>;

std::map<qp_key, double> per_qp(const reading& r, const std::string& name) {
    std::map<qp_key, double> out;
    for (const sample& s : r.samples) {
        if (s.name != name)
            continue;
        auto label = [&](const char* k) {
            auto it = s.labels.find(k);
            return it == s.labels.end() ? std::string() : it->second;
        };
        out[{label("peer"), label("qp"), label("role")}] += s.value;
    }
    return out;
}

// A latency sample (seconds) in microseconds, 9 wide: a summary's
// quantile `q` (or, with q empty, a gauge) of the series matching `match`;
// "-" when there is none yet (NaN: nothing timed).
std::string micros(const reading& r, const std::string& name, std::map<std::string, std::string> match,
                   const std::string& q) {
    if (!q.empty())
        match["quantile"] = q;
    for (const sample& s : r.samples) {
        if (s.name != name || !matches(s, match) || s.value != s.value)
            continue;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%9.1f", s.value * 1e6);
        return buf;
    }
    return "        -";
}

}  // namespace

reading read(const std::string& address, std::size_t stuck) {
    reading r;
    r.samples = parse(fetch(address, "/metrics?connections=1"));
    if (stuck > 0)
        r.stuck = fetch(address, "/stuck?limit=" + std::to_string(stuck));
    r.at = std::chrono::steady_clock::now();
    return r;
}

std::string render(const reading& before, const reading& now, const view_options& options) {
    double seconds = std::chrono::duration<double>(now.at - before.at).count();
    if (seconds <= 0)
        seconds = options.interval;
    auto rate = [&](double a, double b) { return (b - a) / seconds; };
    std::string out;

    std::time_t t = std::time(nullptr);
    char clock[16];
    std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&t));
    out += line("cordma-stat %s  %s  rates over %.1f s", options.address.c_str(), clock, seconds);
    out += line("queue pairs: %.0f live (%.0f broken), %.0f opened, %.0f closed", one(now, "cordma_queue_pairs"),
                one(now, "cordma_queue_pairs_broken"), one(now, "cordma_queue_pairs_opened_total"),
                one(now, "cordma_queue_pairs_closed_total"));

    std::string ends;
    for (const auto& [cause, n] : by(now, "cordma_disconnects_total", "cause"))
        ends += (ends.empty() ? " " : ", ") + cause + " " + std::to_string(static_cast<unsigned long long>(n));
    out += "disconnects:" + (ends.empty() ? std::string(" none") : ends) + "\n";

    // By operation kind.
    out += "\n";
    out += line("%-15s %10s %10s %9s %10s %12s %9s %9s %9s %9s", "operation", "posted/s", "done/s", "failed/s", "MB/s",
                "done", "failed", "p50 us", "p99 us", "max us");
    sums posted0 = by(before, "cordma_operations_posted_total", "kind");
    sums posted1 = by(now, "cordma_operations_posted_total", "kind");
    sums done0 = by(before, "cordma_operations_completed_total", "kind");
    sums done1 = by(now, "cordma_operations_completed_total", "kind");
    sums failed0 = by(before, "cordma_operations_failed_total", "kind");
    sums failed1 = by(now, "cordma_operations_failed_total", "kind");
    sums bytes0 = by(before, "cordma_operation_bytes_total", "kind");
    sums bytes1 = by(now, "cordma_operation_bytes_total", "kind");
    bool any = false;
    for (const char* k : kinds) {
        if (posted1[k] == 0 && failed1[k] == 0)
            continue;
        any = true;
        std::map<std::string, std::string> kind{{"kind", k}};
        out += line("%-15s %10.0f %10.0f %9.0f %10.2f %12.0f %9.0f %s %s %s", k, rate(posted0[k], posted1[k]),
                    rate(done0[k], done1[k]), rate(failed0[k], failed1[k]), rate(bytes0[k], bytes1[k]) / 1e6,
                    done1[k], failed1[k], micros(now, "cordma_operation_latency_seconds", kind, "0.5").c_str(),
                    micros(now, "cordma_operation_latency_seconds", kind, "0.99").c_str(),
                    micros(now, "cordma_operation_latency_max_seconds", kind, "").c_str());
    }
    if (!any)
        out += "(no operation posted yet)\n";
    double requests = rate(one(before, "cordma_work_requests_total"), one(now, "cordma_work_requests_total"));
    double doorbells = rate(one(before, "cordma_doorbells_total"), one(now, "cordma_doorbells_total"));
    out += line("doorbells/s %.0f (%.1f requests each), signalled/s %.0f, send-queue waits/s %.0f, receive-queue "
                "waits/s %.0f",
                doorbells, doorbells > 0 ? requests / doorbells : 0.0,
                rate(one(before, "cordma_signalled_requests_total"), one(now, "cordma_signalled_requests_total")),
                rate(one(before, "cordma_send_queue_waits_total"), one(now, "cordma_send_queue_waits_total")),
                rate(one(before, "cordma_receive_queue_waits_total"), one(now, "cordma_receive_queue_waits_total")));
    std::string errors;
    for (const auto& [status, n] : by(now, "cordma_completions_total", "status"))
        if (status != "success" && n != 0)
            errors += " " + status + " " + std::to_string(static_cast<unsigned long long>(n));
    out += "completions with errors:" + (errors.empty() ? std::string(" none") : errors) + "\n";

    // The devices' own counters: packets each way per second, then every
    // other counter that is not 0 (retries, sequence errors, RNR NAKs).
    std::map<std::pair<std::string, std::string>, std::map<std::string, double>> ports0, ports1;
    for (const auto* r : {&before, &now})
        for (const sample& s : r->samples)
            if (s.name == "cordma_device_events_total")
                (r == &now ? ports1 : ports0)[{s.labels.at("device"), s.labels.at("port")}][s.labels.at("counter")] =
                    s.value;
    for (auto& [port, counters] : ports1) {
        auto& was = ports0.contains(port) ? ports0[port] : counters;  // new since the last reading: no rate yet
        auto packets = [](std::map<std::string, double>& c, const char* hw, const char* ib) { return c[hw] + c[ib]; };
        std::string others;
        for (const auto& [name, value] : counters)
            if (value != 0 && name != "sent_pkts" && name != "rcvd_pkts" && name.rfind("port_", 0) != 0)
                others += " " + name + " " + std::to_string(static_cast<unsigned long long>(value));
        out += line("device %s port %s: packets/s sent %.0f, received %.0f;%s", port.first.c_str(),
                    port.second.c_str(),
                    rate(packets(was, "sent_pkts", "port_xmit_packets"), packets(counters, "sent_pkts", "port_xmit_packets")),
                    rate(packets(was, "rcvd_pkts", "port_rcv_packets"), packets(counters, "rcvd_pkts", "port_rcv_packets")),
                    others.empty() ? " nothing else counted" : others.c_str());
    }

    // By peer host.
    sums host_done1 = by(now, "cordma_peer_operations_completed_total", "host");
    if (!host_done1.empty()) {
        sums host_done0 = by(before, "cordma_peer_operations_completed_total", "host");
        sums host_bytes0 = by(before, "cordma_peer_operation_bytes_total", "host");
        sums host_bytes1 = by(now, "cordma_peer_operation_bytes_total", "host");
        sums host_failed = by(now, "cordma_peer_operations_failed_total", "host");
        sums host_waits = by(now, "cordma_peer_send_queue_waits_total", "host");
        out += "\n";
        out += line("%-24s %10s %10s %12s %9s %9s", "peer host", "done/s", "MB/s", "done", "failed", "sq waits");
        for (const auto& [host, done] : host_done1)
            out += line("%-24s %10.0f %10.2f %12.0f %9.0f %9.0f", host.c_str(), rate(host_done0[host], done),
                        rate(host_bytes0[host], host_bytes1[host]) / 1e6, done, host_failed[host], host_waits[host]);
    }

    // rpc servers' methods.
    std::map<std::pair<std::string, std::string>, double> calls0, calls1;
    for (const sample& s : before.samples)
        if (s.name == "cordma_rpc_calls_total")
            calls0[{s.labels.at("server"), s.labels.at("method")}] = s.value;
    for (const sample& s : now.samples)
        if (s.name == "cordma_rpc_calls_total")
            calls1[{s.labels.at("server"), s.labels.at("method")}] = s.value;
    if (!calls1.empty()) {
        out += "\n";
        out += line("%-6s %-18s %10s %12s %12s %9s %9s %9s %9s %9s", "server", "rpc method", "calls/s", "calls",
                    "answered", "failed", "abandoned", "in flight", "p50 us", "p99 us");
        for (const auto& [key, calls] : calls1) {
            std::map<std::string, std::string> m{{"server", key.first}, {"method", key.second}};
            out += line("%-6s %-18s %10.0f %12.0f %12.0f %9.0f %9.0f %9.0f %s %s", key.first.c_str(),
                        key.second.c_str(), rate(calls0[key], calls), calls, one(now, "cordma_rpc_answered_total", m),
                        one(now, "cordma_rpc_failed_total", m), one(now, "cordma_rpc_abandoned_total", m),
                        one(now, "cordma_rpc_in_flight", m),
                        micros(now, "cordma_rpc_latency_seconds", m, "0.5").c_str(),
                        micros(now, "cordma_rpc_latency_seconds", m, "0.99").c_str());
        }
        for (const auto& [server, n] : by(now, "cordma_rpc_unknown_method_total", "server"))
            if (n != 0)
                out += line("%-6s %-18s %10s %12.0f", server.c_str(), "(no such method)", "", n);
    }

    // Shared receive queues (an rpc server's): how close each ran to dry.
    std::vector<std::map<std::string, std::string>> queues;
    for (const sample& s : now.samples)
        if (s.name == "cordma_srq_size")
            queues.push_back({{"device", s.labels.at("device")}, {"srq", s.labels.at("srq")}});
    if (!queues.empty()) {
        out += "\n";
        out += line("%-12s %8s %11s %8s %8s %10s %12s %9s", "shared rq", "size", "connections", "ready", "fewest",
                    "msgs/s", "messages", "failed");
        for (const auto& q : queues) {
            std::string name = q.at("device") + "#" + q.at("srq");
            // A queue new since the last reading has no rate yet.
            double messages = one(now, "cordma_srq_messages_total", q);
            bool seen = by(before, "cordma_srq_size", "", q).count("") != 0;
            out += line("%-12s %8.0f %11.0f %8.0f %8.0f %10.0f %12.0f %9.0f", name.c_str(),
                        one(now, "cordma_srq_size", q), one(now, "cordma_srq_connections", q),
                        one(now, "cordma_srq_receives_ready", q), one(now, "cordma_srq_receives_fewest_ready", q),
                        seen ? rate(one(before, "cordma_srq_messages_total", q), messages) : 0.0, messages,
                        one(now, "cordma_srq_receives_failed_total", q));
        }
    }

    // What waits longest.
    if (options.stuck > 0 && !now.stuck.empty()) {
        out += "\n";
        out += now.stuck.rfind("cordma: no operation pending", 0) == 0 ? "pending operations: none\n" : now.stuck;
    }

    // The busiest queue pairs.
    if (options.queue_pairs > 0) {
        auto done0 = per_qp(before, "cordma_qp_operations_completed_total");
        auto done = per_qp(now, "cordma_qp_operations_completed_total");
        auto qbytes0 = per_qp(before, "cordma_qp_operation_bytes_total");
        auto qbytes = per_qp(now, "cordma_qp_operation_bytes_total");
        auto qfailed = per_qp(now, "cordma_qp_operations_failed_total");
        auto broken = per_qp(now, "cordma_qp_broken");
        std::vector<std::pair<double, qp_key>> order;
        for (const auto& [key, n] : done)
            order.emplace_back(rate(done0[key], n), key);
        std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        std::size_t shown = std::min(order.size(), options.queue_pairs);
        if (shown > 0) {
            out += "\n";
            out += line("queue pairs, busiest %zu of %zu:", shown, order.size());
            out += line("%-24s %8s %-6s %10s %10s %12s %9s %s", "peer", "qp", "role", "done/s", "MB/s", "done",
                        "failed", "state");
            for (std::size_t i = 0; i < shown; ++i) {
                const qp_key& k = order[i].second;
                out += line("%-24s %8s %-6s %10.0f %10.2f %12.0f %9.0f %s", std::get<0>(k).c_str(),
                            std::get<1>(k).c_str(), std::get<2>(k).c_str(), order[i].first,
                            rate(qbytes0[k], qbytes[k]) / 1e6, done[k], qfailed[k], broken[k] != 0 ? "broken" : "up");
            }
        }
    }
    return out;
}

}  // namespace cordma_stat
