#pragma once
/// The metrics endpoints cordma starts itself: a builder's setting
/// (builder::metrics_endpoint), shared by every builder naming the same
/// address, and CORDMA_METRICS's, kept until the process ends.

#include <memory>
#include <string>

#include <cordma/metrics_endpoint.hpp>

namespace cordma::detail {

/// The endpoint serving at `where`, started now unless a builder's is
/// serving there already (any thread). Throws as metrics_endpoint does.
std::shared_ptr<metrics_endpoint> shared_metrics_endpoint(const std::string& where);

/// Starts CORDMA_METRICS's endpoint, the first time it is called with the
/// variable set (event_listener::start). Throws std::invalid_argument
/// naming the variable when it cannot.
void start_environment_metrics_endpoint();

}  // namespace cordma::detail
