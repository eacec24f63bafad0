#pragma once
/// A hook on a receive_queue's reposts, for an owner whose receive buffers
/// change size with its traffic (a link's elastic receives,
/// lib/link/elastic_receives.hpp), and the internal access to set it.
/// Event listener thread only.

#include <cstdint>
#include <memory>

#include <cordma/local_mr.hpp>
#include <cordma/receive_queue.hpp>

namespace cordma::detail {

class receive_refill {
public:
    virtual ~receive_refill() = default;
    /// `buffer` (a released message's) is about to be posted again: keep
    /// it, or swap it for another (the queue posts whatever it holds then).
    /// Called for every repost, in posting order; allocates nothing.
    virtual void refill(local_slice& buffer) noexcept = 0;
};

struct receive_queue_access {
    /// Installs `refill` on `queue`'s reposts (on the event listener thread).
    static void set_refill(receive_queue& queue, std::shared_ptr<receive_refill> refill);
    /// How many of its receives `queue` has posted again so far: the next
    /// repost is its receive number size() + reposts(), counting from 0.
    static std::uint64_t reposts(const receive_queue& queue);
};

}  // namespace cordma::detail
