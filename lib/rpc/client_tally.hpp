#pragma once
/// A client's call counts (client::metrics), written on the event listener
/// thread and read from any; every live client's, plus those of clients
/// gone, summed for the process's metrics pages (cordma_rpc_client_*).

#include <array>

#include <cordma/rpc.hpp>

#include "engine/counter.hpp"
#include "engine/latency_recorder.hpp"

namespace cordma::rpc::detail {

class client_tally {
public:
    /// Summed on the process's pages while it lives, folded into the
    /// closed sums when it goes.
    client_tally();
    ~client_tally();
    client_tally(const client_tally&) = delete;
    client_tally& operator=(const client_tally&) = delete;

    cordma::detail::counter calls, answered;
    std::array<cordma::detail::counter, 8> errors;  // by rpc_errc's value
    void error(rpc_errc e) noexcept { errors[static_cast<std::size_t>(e) & 7].add(); }
    /// Answered calls, from their start to their answer (loop ticks).
    cordma::detail::latency_recorder latency;

    client_metrics read() const noexcept;
    /// Every live client's and every gone one's, summed.
    static client_metrics process_total();
};

}  // namespace cordma::rpc::detail
