#pragma once
/// Where a module registers memory of the caller's that the peer reads, or
/// that it reads into, for one transfer: on every rail of the builder
/// (builder::rails) when the transfer is large enough to be striped
/// (stripe_threshold), so each rail has a key; on rail 0 alone otherwise,
/// which is all such a transfer uses (one registration, not one per rail).

#include <cstddef>
#include <memory>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>

namespace cordma::detail {

inline std::vector<std::shared_ptr<protection_domain>> registration_pds(builder& b, std::size_t size) {
    const auto& rails = b.pool()->rail_pds();
    if (rails.size() > 1 && size >= b.settings().stripe_threshold)
        return rails;
    return {rails.front()};
}

}  // namespace cordma::detail
