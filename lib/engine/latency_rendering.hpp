#pragma once
/// Latency histograms (latency_histogram.hpp) in the renderings: a
/// Prometheus summary family (quantiles 0.5, 0.9, 0.99, 0.999, its _sum
/// and _count) with a gauge of the maximum beside it, and a JSON object of
/// the same figures. The engine's per-kind histograms and the rpc
/// module's per-method ones are rendered alike.

#include <string>
#include <utility>
#include <vector>

#include <cordma/latency_histogram.hpp>

namespace cordma::detail {

/// Appends one sample line: `name{labels,extra} value` (the braces only
/// when there is a label). The engine's families and the summaries alike.
void prometheus_line(std::string& out, const std::string& name, const std::string& labels, const std::string& extra,
                     const std::string& value);

/// One histogram and its labels (`kind="write"`, already escaped).
using labelled_histogram = std::pair<std::string, const latency_histogram*>;

/// Appends `name` (a summary in seconds, e.g. "cordma_operation_latency_seconds")
/// and `name`'s maximum ("..._max" with the "_seconds" kept last) with their
/// HELP and TYPE; an empty histogram's quantiles are NaN (as Prometheus'
/// client libraries write them). Nothing when `series` is empty.
void prometheus_summary(std::string& out, const std::string& name, const std::string& help,
                        const std::vector<labelled_histogram>& series);

/// Appends {"count": N, "p50_ns": ..., "p90_ns", "p99_ns", "p999_ns",
/// "max_ns", "mean_ns"} (nanoseconds, rounded).
void latency_json(std::string& out, const latency_histogram& h);

}  // namespace cordma::detail
