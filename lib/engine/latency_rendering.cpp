// latency_rendering.hpp: histograms as Prometheus summaries and JSON.
#include "engine/latency_rendering.hpp"

#include "engine/process_metrics.hpp"

#include <cmath>
#include <cstdio>

namespace cordma::detail {

namespace {

constexpr std::pair<const char*, double> quantiles[] = {{"0.5", 0.5}, {"0.9", 0.9}, {"0.99", 0.99}, {"0.999", 0.999}};

std::string seconds(double ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", ns / 1e9);
    return buf;
}

}  // namespace

void prometheus_line(std::string& out, const std::string& name, const std::string& labels, const std::string& extra,
                     const std::string& value) {
    out += name;
    if (!labels.empty() || !extra.empty()) {
        out += '{';
        out += labels;
        if (!labels.empty() && !extra.empty())
            out += ',';
        out += extra;
        out += '}';
    }
    out += ' ';
    out += value;
    out += '\n';
}

void prometheus_summary(std::string& out, const std::string& name, const std::string& help,
                        const std::vector<labelled_histogram>& series) {
    if (series.empty())
        return;
    prometheus_family(out, name, "summary", help);
    for (const auto& [labels, h] : series) {
        bool empty = h->count() == 0;
        for (const auto& [label, q] : quantiles)
            prometheus_line(out, name, labels, std::string("quantile=\"") + label + "\"",
                 empty ? std::string("NaN") : seconds(h->quantile_ns(q)));
        prometheus_line(out, name + "_sum", labels, "", seconds(h->sum_ns()));
        prometheus_line(out, name + "_count", labels, "", std::to_string(h->count()));
    }
    // name_seconds -> name_max_seconds: the unit stays last, as the
    // format's conventions ask.
    std::string max = name;
    if (std::size_t at = max.rfind("_seconds"); at != std::string::npos && at + 8 == max.size())
        max.insert(at, "_max");
    else
        max += "_max";
    prometheus_family(out, max, "gauge", "The longest of them (since the start or the last reset).");
    for (const auto& [labels, h] : series)
        prometheus_line(out, max, labels, "", seconds(h->max_ns()));
}

void latency_json(std::string& out, const latency_histogram& h) {
    auto ns = [](double v) { return std::to_string(static_cast<unsigned long long>(std::llround(v))); };
    out += "{\"count\": " + std::to_string(h.count());
    out += ", \"p50_ns\": " + ns(h.quantile_ns(0.5));
    out += ", \"p90_ns\": " + ns(h.quantile_ns(0.9));
    out += ", \"p99_ns\": " + ns(h.quantile_ns(0.99));
    out += ", \"p999_ns\": " + ns(h.quantile_ns(0.999));
    out += ", \"max_ns\": " + ns(h.max_ns());
    out += ", \"mean_ns\": " + ns(h.mean_ns());
    out += '}';
}

}  // namespace cordma::detail
