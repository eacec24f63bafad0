#pragma once
/// A link's receives, elastic: posted small (a link's control frames and
/// small data fit), grown to the full inline size when the peer asks for
/// room, and small again once the peer says its frames fit and the grown
/// buffers have come back. An idle link pins a few KiB per connection, a
/// busy one its whole window (docs/link.md, "Elastic receives").
///
/// Sizes follow posting order: a receive_queue asks refill() before every
/// repost, so every receive posted after grow() holds a big buffer, every
/// one after shrink() a small one. Event listener thread only.

#include <cstddef>
#include <memory>
#include <vector>

#include <cordma/local_mr.hpp>

#include "engine/receive_refill.hpp"

namespace cordma::detail {

class elastic_receives final : public receive_refill {
public:
    /// `count` receives, posted at `small_frame` bytes (the queue's own
    /// buffers), and `big_frame` bytes each once grown (from `pool`).
    elastic_receives(std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t small_frame,
                     std::size_t big_frame);

    bool grown() const noexcept { return grown_; }
    /// Reposts are big from now on. Allocates the big buffers unless the
    /// last ones are still out (throws as memory_pool::allocate does).
    void grow();
    /// Reposts are small from now on; the big buffers go back to the pool
    /// once every one has come back.
    void shrink() noexcept { grown_ = false; }
    /// Big buffers posted or holding a message now.
    std::size_t big_out() const noexcept { return big_out_; }

    void refill(local_slice& buffer) noexcept override;

private:
    std::shared_ptr<memory_pool> pool_;
    std::size_t count_;
    std::size_t small_frame_;
    std::size_t big_frame_;
    bool grown_ = false;
    std::vector<local_slice> spare_small_;  // swapped out while grown
    std::vector<local_slice> spare_big_;    // not posted: all of them until grown
    std::size_t big_out_ = 0;
};

}  // namespace cordma::detail
