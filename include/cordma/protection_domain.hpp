#pragma once
/// \file
/// A protection domain (ibv_pd): memory regions and queue pairs made from the
/// same one may be used together.

#include <cordma/export.hpp>
#include <memory>

#include <infiniband/verbs.h>

#include <cordma/device.hpp>

namespace cordma {

/// A protection domain: the scope within which memory regions and queue
/// pairs may be used together (a QP can only touch memory registered with
/// its own PD). Shared: every memory region, queue pair and pool made from
/// it holds a reference, so it goes when the last of them does.
class CORDMA_API protection_domain {
public:
    /// Allocates a protection domain on `device`, which it keeps alive.
    /// Throws verbs_error naming ibv_alloc_pd and the device on failure.
    static std::shared_ptr<protection_domain> create(std::shared_ptr<device_context> device);

    ~protection_domain();
    protection_domain(const protection_domain&) = delete;
    protection_domain& operator=(const protection_domain&) = delete;

    /// The libibverbs PD, owned by this object, valid while it lives.
    ibv_pd* native_handle() const noexcept { return pd_; }
    /// The device it was allocated on.
    const std::shared_ptr<device_context>& device() const noexcept { return device_; }

private:
    protection_domain(std::shared_ptr<device_context> device, ibv_pd* pd)
        : device_(std::move(device)), pd_(pd) {}

    std::shared_ptr<device_context> device_;
    ibv_pd* pd_;
};

}  // namespace cordma
