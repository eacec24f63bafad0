#pragma once
/// What one connection counts (metrics.hpp's connection_counters, live):
/// written by the thread running its event listener's loop and read by a
/// snapshot on any thread (counter.hpp).

#include <algorithm>
#include <array>
#include <cstdint>

#include <infiniband/verbs.h>

#include <cordma/metrics.hpp>
#include <cordma/detail/operation.hpp>
#include "engine/counter.hpp"

namespace cordma::detail {

static_assert(static_cast<std::size_t>(op_kind::recv) + 1 == operation_kinds);

struct connection_tally {
    struct per_kind {
        counter posted;
        counter completed;
        counter failed;
        counter bytes;
    };
    std::array<per_kind, operation_kinds> kinds;
    std::array<counter, completion_statuses> completions;
    // No counter of send-queue work requests: every one is its kind's
    // posted, so read() sums those.
    counter doorbells;
    counter signalled;
    counter send_waits;
    counter recv_waits;

    per_kind& operator[](op_kind kind) noexcept { return kinds[static_cast<std::size_t>(kind)]; }
    void count_completion(ibv_wc_status status) noexcept {
        completions[std::min<std::size_t>(static_cast<std::size_t>(status), completion_statuses - 1)].add();
    }
    /// Every counter, read once.
    connection_counters read() const noexcept {
        connection_counters c;
        for (std::size_t k = 0; k < operation_kinds; ++k)
            c.operations[k] = {kinds[k].posted.get(), kinds[k].completed.get(), kinds[k].failed.get(),
                               kinds[k].bytes.get()};
        for (std::size_t s = 0; s < completion_statuses; ++s)
            c.completions[s] = completions[s].get();
        for (std::size_t k = 0; k < operation_kinds; ++k)
            if (k != static_cast<std::size_t>(op_kind::recv))
                c.work_requests += c.operations[k].posted;
        c.doorbells = doorbells.get();
        c.signalled = signalled.get();
        c.send_waits = send_waits.get();
        c.recv_waits = recv_waits.get();
        return c;
    }
};

}  // namespace cordma::detail
