#pragma once
/// A registered memory region (ibv_mr) and the description of a region a
/// peer may access (remote_slice: address, length, rkey).

#include <cordma/export.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <infiniband/verbs.h>

#include <cordma/access.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/remote_slice.hpp>

namespace cordma {

/// Memory the caller owns, registered with a protection domain. Move-only;
/// deregisters on destruction. The memory must outlive the registration and
/// every operation that names it.
class CORDMA_API memory_region {
public:
    /// Registers [address, address + length) with `access` access.
    /// Throws verbs_error naming the length and the access on failure; when
    /// the locked-memory limit (RLIMIT_MEMLOCK) is what refused it, code()
    /// is cordma::errc::memlock_limit and the message gives the limit, the
    /// bytes asked for and how to raise it.
    static memory_region register_memory(std::shared_ptr<protection_domain> pd, void* address,
                                         std::size_t length, access_flags access);

    memory_region() = default;
    memory_region(memory_region&& other) noexcept;
    memory_region& operator=(memory_region&& other) noexcept;
    ~memory_region();

    ibv_mr* native_handle() const noexcept { return mr_; }
    void* data() const noexcept { return mr_->addr; }
    std::size_t size() const noexcept { return mr_->length; }
    std::uint32_t lkey() const noexcept { return mr_->lkey; }
    std::uint32_t rkey() const noexcept { return mr_->rkey; }
    access_flags access() const noexcept { return rights_; }
    const std::shared_ptr<protection_domain>& pd() const noexcept { return pd_; }

    /// This region as a peer sees it (the rkey is meaningful only if the
    /// region was registered with remote access).
    remote_slice remote() const noexcept {
        return {reinterpret_cast<std::uint64_t>(mr_->addr), mr_->length, mr_->rkey};
    }

private:
    memory_region(std::shared_ptr<protection_domain> pd, ibv_mr* mr, access_flags access)
        : pd_(std::move(pd)), mr_(mr), rights_(access) {}

    std::shared_ptr<protection_domain> pd_;
    ibv_mr* mr_ = nullptr;
    access_flags rights_ = access_flags::none;
};

}  // namespace cordma
