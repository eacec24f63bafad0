#include <cordma/protection_domain.hpp>

#include "verbs/check.hpp"

namespace cordma {

std::shared_ptr<protection_domain> protection_domain::create(std::shared_ptr<device_context> device) {
    errno = 0;
    ibv_pd* pd = detail::check_pointer(ibv_alloc_pd(device->native_handle()), [&] {
        return "ibv_alloc_pd(device=" + device->name() + ")";
    });
    return std::shared_ptr<protection_domain>(new protection_domain(std::move(device), pd));
}

protection_domain::~protection_domain() { ibv_dealloc_pd(pd_); }

}  // namespace cordma
