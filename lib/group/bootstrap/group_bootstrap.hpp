#pragma once
/// Where a group's ranks learn each other's endpoints: a launcher (PMIx,
/// a torchrun-style rendezvous). group_options::from_environment() makes
/// one; group::form calls exchange() once, on a thread of its own (it
/// blocks).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace cordma::detail {

class group_bootstrap {
public:
    virtual ~group_bootstrap() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// For logs and errors: "PMIx (namespace prterun-x-1234@1, rank 2 of 4)".
    virtual std::string describe() const = 0;
    /// Publishes this rank's `endpoint` ("ip:port") and returns every rank's,
    /// index = rank. Blocks until all are known or `deadline` passes; then
    /// throws cordma::group_error (std::errc::timed_out) naming the ranks
    /// whose endpoints never came. Called once.
    virtual std::vector<std::string> exchange(const std::string& endpoint,
                                              std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace cordma::detail
