#pragma once
/// A group's collective counts by kind (group::metrics), written on its
/// event listener's thread and read from any; every live group's, plus
/// those of groups gone, summed for the process's metrics pages
/// (cordma_group_*).

#include <array>
#include <cstdint>

#include <cordma/group.hpp>

#include "engine/counter.hpp"
#include "engine/latency_recorder.hpp"
#include "group/collective.hpp"

namespace cordma::detail {

class group_tally {
public:
    /// Summed on the process's pages while it lives, folded into the
    /// closed sums when it goes.
    group_tally();
    ~group_tally();
    group_tally(const group_tally&) = delete;
    group_tally& operator=(const group_tally&) = delete;

    struct per_kind {
        counter calls, completed, failed;
        latency_recorder latency;
    };
    /// Collective `c`'s counts.
    per_kind& operator[](collective c) noexcept { return kinds_[static_cast<std::size_t>(c) - 1]; }

    group_metrics read() const noexcept;

    /// Every live group's and every gone one's, summed, and how many live.
    static group_metrics process_total(std::uint64_t* open);

private:
    std::array<per_kind, 8> kinds_;
};

}  // namespace cordma::detail
