#pragma once
/// The torchrun-style bootstrap: RANK, WORLD_SIZE, MASTER_ADDR and
/// MASTER_PORT, and a small TCP rendezvous served by rank 0.
///
/// The conversation (frames in rendezvous_message.hpp):
///
///     rank r                                  rank 0 (MASTER_ADDR:MASTER_PORT)
///     connect; refused: retry (10 ms, doubling to 250 ms) until the deadline
///     -> publish {r, WORLD_SIZE, endpoint}
///                                             <- status (who has published), at
///                                                once and every 500 ms while
///                                                someone new came
///                                             <- list, once all WORLD_SIZE have
///                                                published; then rank 0 closes
///     or, for a rank taken by another endpoint or another WORLD_SIZE:
///                                             <- refused {why}; closes
///
/// Rank 0 publishes its own endpoint directly (it is slot 0). A published
/// rank whose connection ends before the list frees its slot; the same
/// endpoint published again replaces the old connection (a reconnect).
/// Rank r reconnects and publishes again if rank 0 closes without a list.
/// Everything ends at the deadline: group_error(timed_out) naming the ranks
/// that never published (rank 0 knows; the others know from the last status,
/// or name rank 0 when they never reached it).

#include <chrono>
#include <string>
#include <vector>

#include <cordma/address.hpp>

#include "group/bootstrap/group_bootstrap.hpp"

namespace cordma::detail {

class rendezvous_bootstrap final : public group_bootstrap {
public:
    /// `master`: MASTER_ADDR and MASTER_PORT. Throws std::invalid_argument
    /// for a world size outside 1..65536 or a rank outside it.
    rendezvous_bootstrap(int rank, int world_size, host_port master);

    int rank() const override { return rank_; }
    int size() const override { return world_size_; }
    std::string describe() const override;
    std::vector<std::string> exchange(const std::string& endpoint,
                                      std::chrono::steady_clock::time_point deadline) override;

private:
    std::vector<std::string> join(const std::string& endpoint, std::chrono::steady_clock::time_point deadline);
    std::string where() const;

    int rank_;
    int world_size_;
    host_port master_;
};

}  // namespace cordma::detail
