#include <cordma/memory_region.hpp>

#include <utility>

#include "verbs/check.hpp"

namespace cordma {

memory_region memory_region::register_memory(std::shared_ptr<protection_domain> pd, void* address,
                                             std::size_t length, access_flags access) {
    errno = 0;
    ibv_mr* mr = detail::check_pointer(ibv_reg_mr(pd->native_handle(), address, length, to_verbs(access)), [&] {
        return "ibv_reg_mr(length=" + std::to_string(length) + ", access=" + to_string(access) + ")";
    });
    return memory_region(std::move(pd), mr, access);
}

memory_region::memory_region(memory_region&& other) noexcept
    : pd_(std::move(other.pd_)), mr_(std::exchange(other.mr_, nullptr)), rights_(other.rights_) {}

memory_region& memory_region::operator=(memory_region&& other) noexcept {
    if (this != &other) {
        if (mr_ != nullptr)
            ibv_dereg_mr(mr_);
        pd_ = std::move(other.pd_);
        mr_ = std::exchange(other.mr_, nullptr);
        rights_ = other.rights_;
    }
    return *this;
}

memory_region::~memory_region() {
    if (mr_ != nullptr)
        ibv_dereg_mr(mr_);
}

}  // namespace cordma
