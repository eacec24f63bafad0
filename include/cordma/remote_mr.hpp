#pragma once
/// \file
/// A region of the peer's memory that the peer's agent granted us: what to
/// read, write or use atomics on, until its lease deadline. Move-only: when
/// it is dropped the owner is told and frees the region; send_remote_mr
/// hands it back instead.

#include <cordma/export.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <cordma/remote_slice.hpp>

namespace cordma {

namespace detail {
class agent;
}

/// A grant of the peer's memory, from connection::request_remote_mr or
/// receive_remote_mr: where it is (all(), slice()), what may be done
/// (access()), and until when (deadline(), expired()). Move-only, as the
/// grant is one: dropping it tells the owner to free the region, and
/// connection::send_remote_mr hands it back instead. Not tied to the
/// connection's lifetime: it may outlive it (the owner then frees the
/// region when the connection goes).
class CORDMA_API remote_mr {
public:
    /// No grant: operator bool is false.
    remote_mr() = default;
    /// Takes over `other`'s grant; `other` is left empty (and tells nobody).
    remote_mr(remote_mr&& other) noexcept;
    /// Releases this object's grant (as the destructor does), then takes
    /// over `other`'s; `other` is left empty.
    remote_mr& operator=(remote_mr&& other) noexcept;
    remote_mr(const remote_mr&) = delete;
    remote_mr& operator=(const remote_mr&) = delete;
    /// Tells the owner it may free the region (unless handed back).
    ~remote_mr();

    /// True while it holds a grant (not empty, moved from or handed back).
    explicit operator bool() const noexcept { return region_id_ != 0; }
    /// All of it (address, length and rkey), for the operations.
    const remote_slice& all() const noexcept { return mr_; }
    /// All of it, so a remote_mr can be passed where an operation takes a
    /// remote_slice.
    operator remote_slice() const noexcept { return mr_; }
    /// `length` bytes from `offset`, with the grant's access; throws
    /// std::out_of_range naming the region, offset and length if they do
    /// not fit.
    remote_slice slice(std::uint64_t offset, std::uint64_t length) const { return mr_.slice(offset, length); }
    /// The region's length in bytes.
    std::uint64_t size() const noexcept { return mr_.length; }
    /// What the owner granted: the intersection of what was asked, what its
    /// region allows and what its agent_limits and builder allow. Operations
    /// outside it are refused before anything is posted.
    access_flags access() const noexcept { return mr_.access; }
    /// About when the owner ends it, by this side's clock: the lease the
    /// owner granted, counted from when the grant arrived (so a little
    /// later than the owner's own deadline). For the owner's word, see
    /// expired().
    std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }
    /// True once the owner has ended the grant (its lease ran out by the
    /// owner's clock, or it revoked it) and told us so: accesses now fail
    /// with a remote access error, and send_remote_mr throws. No clocks are
    /// compared: the owner's word arrives as a message. Any thread.
    bool expired() const noexcept { return ended_ && ended_->load(std::memory_order_acquire); }
    /// The number the owner's agent gave the region (unique per connection,
    /// never 0): the owner's errors and log lines name regions by it.
    std::uint64_t id() const noexcept { return region_id_; }

private:
    friend class detail::agent;
    remote_mr(std::weak_ptr<detail::agent> agent, std::uint64_t region_id, remote_slice mr,
              std::chrono::steady_clock::time_point deadline, std::shared_ptr<std::atomic<bool>> ended) noexcept
        : agent_(std::move(agent)), region_id_(region_id), mr_(mr), deadline_(deadline), ended_(std::move(ended)) {}
    /// Gives up the region without telling the owner (it was handed back).
    std::uint64_t disown() noexcept;
    void release() noexcept;

    std::weak_ptr<detail::agent> agent_;
    std::uint64_t region_id_ = 0;
    remote_slice mr_{};
    std::chrono::steady_clock::time_point deadline_{};
    // Set by our agent when the owner's revoke_mr arrives.
    std::shared_ptr<std::atomic<bool>> ended_;
};

}  // namespace cordma
