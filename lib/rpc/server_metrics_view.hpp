#pragma once
/// An rpc server's per-method counts as any thread reads them
/// (server::metrics, and the process's metrics endpoint, where every live
/// server shows as cordma_rpc_*{server,method}). The counts themselves are
/// the handler entries' (written on the event listener thread); the view
/// keeps their names and tallies under a lock taken only when a method is
/// registered and when the counts are read.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cordma/rpc.hpp>

#include "engine/counter.hpp"
#include "engine/latency_recorder.hpp"

namespace cordma::rpc::detail {

/// One method's counts (handler_entry's, shared with it).
struct method_tally {
    cordma::detail::counter calls, answered, failed, abandoned;
    std::array<cordma::detail::counter, 8> errors;  // the failed, by rpc_errc's value
    cordma::detail::latency_recorder latency;       // the answered, from request to answer (loop ticks)
    /// A failed call, for `why` (event listener thread).
    void fail(rpc_errc why) noexcept {
        failed.add();
        errors[static_cast<std::size_t>(why) & 7].add();
    }
};

/// Adds rpc's part (servers' methods, clients' totals) to the process's
/// metrics pages, once (a server's view or a client's tally calls it).
void add_rpc_metrics_section();

class server_metrics_view {
public:
    /// A new view, listed on the process's metrics pages while it lives
    /// (the first also adds rpc's section to them).
    static std::shared_ptr<server_metrics_view> publish();

    /// Its number on the pages (label server: 1 for the process's first).
    std::uint64_t number() const noexcept { return number_; }
    /// A method registered (any = handle_any's).
    void add(std::uint32_t method, bool any, const std::string& name, std::shared_ptr<method_tally> counts);
    /// Calls to a method without a handler (event listener thread).
    cordma::detail::counter unknown;
    /// Every method's counts, by number, handle_any's last.
    server_metrics read() const;

    explicit server_metrics_view(std::uint64_t number) : number_(number) {}

private:
    struct entry {
        std::uint32_t method;
        bool any;
        std::string name;
        std::shared_ptr<method_tally> counts;
    };
    std::uint64_t number_;
    mutable std::mutex mutex_;
    std::vector<entry> entries_;  // by (any, method)
};

}  // namespace cordma::rpc::detail
