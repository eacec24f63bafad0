#pragma once
/// A protection domain (ibv_pd): memory regions and queue pairs made from the
/// same one may be used together.

#include <cordma/export.hpp>
#include <memory>

#include <infiniband/verbs.h>

#include <cordma/device.hpp>

namespace cordma {

class CORDMA_API protection_domain {
public:
    /// Allocates a protection domain on `device`, which it keeps alive.
    static std::shared_ptr<protection_domain> create(std::shared_ptr<device_context> device);

    ~protection_domain();
    protection_domain(const protection_domain&) = delete;
    protection_domain& operator=(const protection_domain&) = delete;

    ibv_pd* native_handle() const noexcept { return pd_; }
    const std::shared_ptr<device_context>& device() const noexcept { return device_; }

private:
    protection_domain(std::shared_ptr<device_context> device, ibv_pd* pd)
        : device_(std::move(device)), pd_(pd) {}

    std::shared_ptr<device_context> device_;
    ibv_pd* pd_;
};

}  // namespace cordma
