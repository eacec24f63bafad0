#pragma once
/// What a work request's wr_id points to. The event listener casts wr_id
/// back to this and calls on_complete: no lookup table, no lock, no virtual
/// call through an object that might already be gone (targets are owned by
/// connections, which outlive their in-flight work requests).

#include <cordma/export.hpp>
#include <cstdint>

#include <infiniband/verbs.h>

namespace cordma::detail {

struct CORDMA_API completion_target {
    void (*on_complete)(completion_target* self, const ibv_wc& wc) noexcept = nullptr;

    std::uint64_t as_wr_id() noexcept { return reinterpret_cast<std::uintptr_t>(this); }
    static completion_target* from_wr_id(std::uint64_t wr_id) noexcept {
        return reinterpret_cast<completion_target*>(static_cast<std::uintptr_t>(wr_id));
    }
};

/// Work requests a connection chained while the event listener was running
/// a drain pass (coroutines resumed by completions posting their next
/// operation): the listener rings every pending doorbell when the pass
/// ends, so the chain goes out with one ibv_post_send.
struct CORDMA_API doorbell {
    void (*ring)(doorbell* self) noexcept = nullptr;
    doorbell* next_pending = nullptr;
    bool pending = false;
};

/// What an io_uring submission's user_data points to.
struct CORDMA_API uring_target {
    void (*on_ready)(uring_target* self, int result) noexcept = nullptr;
};

}  // namespace cordma::detail
