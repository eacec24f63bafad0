// server_metrics_view.hpp: the servers' counts for any thread, and rpc's
// section of the process's metrics pages (engine/process_metrics.hpp).
#include "rpc/server_metrics_view.hpp"

#include <algorithm>

#include "core/tick_clock.hpp"
#include "engine/latency_rendering.hpp"
#include "engine/process_metrics.hpp"
#include "rpc/client_tally.hpp"

namespace cordma::rpc::detail {

namespace {

struct server_list {
    std::mutex mutex;
    std::vector<std::weak_ptr<server_metrics_view>> live;
    std::uint64_t made = 0;
};

// Never destroyed (a page may be asked for while statics are destroyed).
server_list& servers() {
    static auto* list = new server_list;
    return *list;
}

std::vector<std::shared_ptr<server_metrics_view>> live_servers() {
    server_list& l = servers();
    std::lock_guard lock(l.mutex);
    std::vector<std::shared_ptr<server_metrics_view>> out;
    for (const auto& w : l.live)
        if (auto s = w.lock())
            out.push_back(std::move(s));
    return out;
}

// rpc_errc's names, by value (the label error).
const char* const error_names[8] = {"none",     "unknown_method", "handler_failed", "too_large",
                                    "protocol", "timed_out",      "cancelled",      "server_gone"};

const cordma::detail::value_family<method_metrics> families[] = {
    {"cordma_rpc_calls_total", "counter", "rpc calls received, by server and method.",
     [](const method_metrics& m) { return m.calls; }},
    {"cordma_rpc_answered_total", "counter", "rpc calls answered with a response, by server and method.",
     [](const method_metrics& m) { return m.answered; }},
    {"cordma_rpc_failed_total", "counter", "rpc calls answered with an error, by server and method.",
     [](const method_metrics& m) { return m.failed; }},
    {"cordma_rpc_abandoned_total", "counter",
     "rpc calls whose client was gone, or the server shut, before the answer, by server and method.",
     [](const method_metrics& m) { return m.abandoned; }},
    {"cordma_rpc_in_flight", "gauge", "rpc calls received and not yet answered, by server and method.",
     [](const method_metrics& m) { return m.in_flight(); }},
};

void clients_prometheus(std::string& out) {
    client_metrics c = client_tally::process_total();
    if (c.calls == 0)
        return;
    using cordma::detail::prometheus_family;
    prometheus_family(out, "cordma_rpc_client_calls_total", "counter", "rpc calls made by this process's clients.");
    out += "cordma_rpc_client_calls_total " + std::to_string(c.calls) + "\n";
    prometheus_family(out, "cordma_rpc_client_answered_total", "counter",
                      "rpc calls of this process's clients answered with a response.");
    out += "cordma_rpc_client_answered_total " + std::to_string(c.answered) + "\n";
    prometheus_family(out, "cordma_rpc_client_errors_total", "counter",
                      "rpc calls of this process's clients that ended with an error, by error.");
    for (std::size_t e = 1; e < c.errors.size(); ++e)
        out += std::string("cordma_rpc_client_errors_total{error=\"") + error_names[e] + "\"} " +
               std::to_string(c.errors[e]) + "\n";
    cordma::detail::prometheus_summary(out, "cordma_rpc_client_latency_seconds",
                                       "How long this process's clients' answered rpc calls took, from the call to "
                                       "its answer.",
                                       {{"", &c.latency}});
}

void prometheus(std::string& out) {
    clients_prometheus(out);
    auto list = live_servers();
    if (list.empty())
        return;
    std::vector<std::pair<std::uint64_t, server_metrics>> read;
    for (const auto& s : list)
        read.emplace_back(s->number(), s->read());
    // Each method's labels, made once for every family and the latencies.
    std::vector<std::pair<std::string, const method_metrics*>> methods;
    for (const auto& [number, m] : read)
        for (const method_metrics& mm : m.methods)
            methods.emplace_back("server=\"" + std::to_string(number) + "\",method=\"" +
                                     cordma::detail::prometheus_label(mm.name) + "\"",
                                 &mm);
    cordma::detail::prometheus_table(out, families, methods);
    cordma::detail::prometheus_family(out, "cordma_rpc_errors_total", "counter",
                                      "rpc calls answered with an error, by server, method and error.");
    for (const auto& [labels, mm] : methods)
        for (std::size_t e = 1; e < mm->errors.size(); ++e)
            if (mm->errors[e] != 0)
                out += "cordma_rpc_errors_total{" + labels + ",error=\"" + error_names[e] + "\"} " +
                       std::to_string(mm->errors[e]) + "\n";
    std::vector<cordma::detail::labelled_histogram> latencies;
    for (const auto& [labels, mm] : methods)
        latencies.emplace_back(labels, &mm->latency);
    cordma::detail::prometheus_summary(out, "cordma_rpc_latency_seconds",
                                       "How long answered rpc calls took in the server, from the loop turn that "
                                       "received the request to the one that sent the answer, by server and method.",
                                       latencies);
    cordma::detail::prometheus_family(out, "cordma_rpc_unknown_method_total", "counter",
                                      "rpc calls to a method without a handler, by server.");
    for (const auto& [number, m] : read)
        out += "cordma_rpc_unknown_method_total{server=\"" + std::to_string(number) + "\"} " +
               std::to_string(m.unknown_method) + "\n";
}

void json(std::string& out) {
    auto list = live_servers();
    out += "\"rpc_servers\":[";
    bool first = true;
    for (const auto& s : list) {
        server_metrics m = s->read();
        out += first ? "" : ",";
        first = false;
        out += "{\"server\":" + std::to_string(s->number()) + ",\"unknown_method\":" +
               std::to_string(m.unknown_method) + ",\"methods\":[";
        for (std::size_t i = 0; i < m.methods.size(); ++i) {
            const method_metrics& mm = m.methods[i];
            out += i == 0 ? "{" : ",{";
            out += "\"method\":" + std::to_string(mm.method) + ",\"any_method\":" + (mm.any_method ? "true" : "false");
            out += ",\"name\":";
            cordma::detail::json_string(out, mm.name);
            out += ",\"calls\":" + std::to_string(mm.calls) + ",\"answered\":" + std::to_string(mm.answered);
            out += ",\"failed\":" + std::to_string(mm.failed) + ",\"abandoned\":" + std::to_string(mm.abandoned);
            out += ",\"in_flight\":" + std::to_string(mm.in_flight()) + ",\"errors\":{";
            for (std::size_t e = 1; e < mm.errors.size(); ++e)
                out += std::string(e == 1 ? "" : ",") + "\"" + error_names[e] + "\":" + std::to_string(mm.errors[e]);
            out += "},\"latency\":";
            cordma::detail::latency_json(out, mm.latency);
            out += "}";
        }
        out += "]}";
    }
    out += "]";
    client_metrics c = client_tally::process_total();
    out += ",\"rpc_clients\":{\"calls\":" + std::to_string(c.calls) + ",\"answered\":" + std::to_string(c.answered) +
           ",\"errors\":{";
    for (std::size_t e = 1; e < c.errors.size(); ++e)
        out += std::string(e == 1 ? "" : ",") + "\"" + error_names[e] + "\":" + std::to_string(c.errors[e]);
    out += "},\"latency\":";
    cordma::detail::latency_json(out, c.latency);
    out += "}";
}

}  // namespace

void add_rpc_metrics_section() {
    static std::once_flag once;
    std::call_once(once, [] { cordma::detail::add_metrics_section({&prometheus, &json}); });
}

std::shared_ptr<server_metrics_view> server_metrics_view::publish() {
    add_rpc_metrics_section();
    server_list& l = servers();
    std::lock_guard lock(l.mutex);
    auto view = std::make_shared<server_metrics_view>(++l.made);
    std::erase_if(l.live, [](const std::weak_ptr<server_metrics_view>& w) { return w.expired(); });
    l.live.push_back(view);
    return view;
}

void server_metrics_view::add(std::uint32_t method, bool any, const std::string& name,
                              std::shared_ptr<method_tally> counts) {
    std::lock_guard lock(mutex_);
    entry e{method, any, name, std::move(counts)};
    auto at = std::upper_bound(entries_.begin(), entries_.end(), e, [](const entry& a, const entry& b) {
        return a.any != b.any ? !a.any : a.method < b.method;
    });
    entries_.insert(at, std::move(e));
}

server_metrics server_metrics_view::read() const {
    server_metrics out;
    double ns_per_tick = cordma::detail::tick_clock::ns_per_tick();
    std::lock_guard lock(mutex_);
    out.methods.reserve(entries_.size());
    for (const entry& e : entries_) {
        method_metrics m;
        m.method = e.method;
        m.any_method = e.any;
        m.name = e.name;
        // The ends first: a call that ends between the reads then shows as
        // in flight, never as more ended than received.
        m.answered = e.counts->answered.get();
        m.failed = e.counts->failed.get();
        m.abandoned = e.counts->abandoned.get();
        for (std::size_t i = 0; i < m.errors.size(); ++i)
            m.errors[i] = e.counts->errors[i].get();
        m.calls = e.counts->calls.get();
        m.latency = e.counts->latency.read(ns_per_tick);
        out.methods.push_back(std::move(m));
    }
    out.unknown_method = unknown.get();
    return out;
}

}  // namespace cordma::rpc::detail
