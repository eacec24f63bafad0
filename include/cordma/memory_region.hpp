#pragma once
/// \file
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

    /// No region; only assigning one to it makes it usable.
    memory_region() = default;
    /// Takes over `other`'s registration; `other` is left empty.
    memory_region(memory_region&& other) noexcept;
    /// Deregisters what this object held, then takes over `other`'s
    /// registration; `other` is left empty.
    memory_region& operator=(memory_region&& other) noexcept;
    /// Deregisters the region (ibv_dereg_mr), which invalidates its keys:
    /// a peer's later access fails on the peer's side. The memory itself is
    /// the caller's and stays.
    ~memory_region();

    /// The libibverbs MR, or nullptr for an empty object.
    ibv_mr* native_handle() const noexcept { return mr_; }
    /// The first byte registered. Precondition (for this and the other
    /// accessors below but pd()): the object holds a region.
    void* data() const noexcept { return mr_->addr; }
    /// The bytes registered.
    std::size_t size() const noexcept { return mr_->length; }
    /// The key this side's work requests name the region with.
    std::uint32_t lkey() const noexcept { return mr_->lkey; }
    /// The key a peer's one-sided operations need (meaningful only with
    /// remote access).
    std::uint32_t rkey() const noexcept { return mr_->rkey; }
    /// The access it was registered with.
    access_flags access() const noexcept { return rights_; }
    /// The protection domain it was registered with (nullptr when empty).
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
