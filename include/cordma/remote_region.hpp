#pragma once
/// A region of the peer's memory that the peer's agent granted us: what to
/// read, write or use atomics on, until its lease deadline. Move-only: when
/// it is dropped the owner is told and frees the region; send_remote_mr
/// hands it back instead.

#include <cordma/export.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include <cordma/remote_mr.hpp>

namespace cordma {

namespace detail {
class agent;
}

class CORDMA_API remote_region {
public:
    remote_region() = default;
    remote_region(remote_region&& other) noexcept;
    remote_region& operator=(remote_region&& other) noexcept;
    remote_region(const remote_region&) = delete;
    remote_region& operator=(const remote_region&) = delete;
    /// Tells the owner it may free the region (unless handed back).
    ~remote_region();

    explicit operator bool() const noexcept { return region_id_ != 0; }
    /// Address, length and rkey, for the operations.
    const remote_mr& mr() const noexcept { return mr_; }
    operator remote_mr() const noexcept { return mr_; }
    remote_mr slice(std::uint64_t offset, std::uint64_t length) const { return mr_.slice(offset, length); }
    std::uint64_t size() const noexcept { return mr_.length; }
    /// After this the owner deregisters it: accesses fail with a remote
    /// access error.
    std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }
    std::uint64_t id() const noexcept { return region_id_; }

    /// For the agent.
    remote_region(std::weak_ptr<detail::agent> agent, std::uint64_t region_id, remote_mr mr,
                  std::chrono::steady_clock::time_point deadline) noexcept
        : agent_(std::move(agent)), region_id_(region_id), mr_(mr), deadline_(deadline) {}
    /// Gives up the region without telling the owner (it was handed back).
    std::uint64_t disown() noexcept;

private:
    void release() noexcept;

    std::weak_ptr<detail::agent> agent_;
    std::uint64_t region_id_ = 0;
    remote_mr mr_{};
    std::chrono::steady_clock::time_point deadline_{};
};

}  // namespace cordma
