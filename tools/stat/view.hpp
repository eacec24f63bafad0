#pragma once
// cordma-stat's view: two readings of a metrics endpoint an interval
// apart, rendered as text (totals by operation kind, peer hosts, rpc
// methods, the busiest queue pairs), rates over the interval.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "scrape.hpp"

namespace cordma_stat {

/// One page's samples and when they were read.
struct reading {
    std::vector<sample> samples;
    /// The endpoint's /stuck page (empty when not asked for).
    std::string stuck;
    std::chrono::steady_clock::time_point at;
};

/// The endpoint's page with every queue pair (/metrics?connections=1),
/// and its `stuck` oldest pending operations (/stuck) unless 0.
reading read(const std::string& address, std::size_t stuck);

struct view_options {
    std::string address;
    double interval = 1.0;
    /// Queue pairs listed, busiest first.
    std::size_t queue_pairs = 10;
    /// Pending operations listed, oldest first.
    std::size_t stuck = 5;
};

/// What changed from `before` to `now`, as the terminal shows it.
std::string render(const reading& before, const reading& now, const view_options& options);

}  // namespace cordma_stat
