#pragma once
/// What one connection counts (metrics.hpp's connection_counters, live):
/// written by the thread running its event listener's loop, one at a
/// time, and read by a snapshot on any thread. Each counter is a relaxed
/// atomic the writer loads and stores (no read-modify-write, no lock
/// prefix: as cheap as a plain add), so a reader sees it whole.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include <infiniband/verbs.h>

#include <cordma/metrics.hpp>
#include <cordma/detail/operation.hpp>

namespace cordma::detail {

class counter {
public:
    void add([[maybe_unused]] std::uint64_t n = 1) noexcept {
#ifndef CORDMA_METRICS_OFF  // meson -Dmetrics=false: only to measure what counting costs
        value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
    }
    std::uint64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> value_{0};
};

static_assert(static_cast<std::size_t>(op_kind::recv) + 1 == operation_kinds);
static_assert(static_cast<int>(op_kind::write_with_imm) == static_cast<int>(operation_kind::write_with_imm));
static_assert(static_cast<int>(op_kind::compare_swap) == static_cast<int>(operation_kind::compare_swap));

struct connection_tally {
    struct per_kind {
        counter posted;
        counter completed;
        counter failed;
        counter bytes;
    };
    std::array<per_kind, operation_kinds> kinds;
    std::array<counter, completion_statuses> completions;
    counter work_requests;
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
        c.work_requests = work_requests.get();
        c.doorbells = doorbells.get();
        c.signalled = signalled.get();
        c.send_waits = send_waits.get();
        c.recv_waits = recv_waits.get();
        return c;
    }
};

}  // namespace cordma::detail
