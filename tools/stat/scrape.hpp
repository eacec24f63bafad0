#pragma once
// cordma-stat's input: one page fetched from a metrics endpoint
// (metrics_endpoint.hpp) and its samples parsed (Prometheus' text format).

#include <map>
#include <string>
#include <vector>

namespace cordma_stat {

/// One sample line: name{labels} value.
struct sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

/// The page at `path` of the endpoint at `address` ("unix:/path", a path,
/// or "HOST:PORT"). Throws std::runtime_error saying what failed (the
/// address unreachable, no answer within 5 s, a status other than 200).
std::string fetch(const std::string& address, const std::string& path);

/// The samples of a Prometheus text page (comments skipped). Throws
/// std::runtime_error naming the first line it cannot read.
std::vector<sample> parse(const std::string& page);

}  // namespace cordma_stat
