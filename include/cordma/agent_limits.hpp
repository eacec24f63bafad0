#pragma once
/// \file
/// What a peer may take from this side through the memory-region agent.

#include <cordma/export.hpp>
#include <chrono>
#include <cstddef>

#include <cordma/access.hpp>

namespace cordma {

/// The limits this side's agent enforces on what peers take: requests over
/// them are refused with an answer naming the limit, and the peer's call
/// throws. Set per builder (builder::agent_limits); every connection it makes
/// or accepts uses them. The defaults suit a host with a few GiB to share;
/// a server facing untrusted peers should lower them.
struct CORDMA_API agent_limits {
    /// The largest region a peer may request.
    std::size_t max_region_size = 64 << 20;
    /// Bytes a peer may hold at once, over all regions granted to it.
    std::size_t max_total_bytes = 256 << 20;
    /// Regions a peer may hold at once.
    std::size_t max_regions = 64;
    /// Rights a peer may be granted; requests for more are refused.
    access_flags allowed_access = access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic;
    /// Bytes one peer host may hold at once over ALL its connections to this
    /// builder (its listeners and connects; new_connection adds no room).
    std::size_t max_peer_total_bytes = 1024 << 20;
    /// Regions one peer host may hold at once over all its connections.
    std::size_t max_peer_regions = 1024;
    /// Lease of a grant when the request names none.
    std::chrono::milliseconds default_lease{30'000};
    /// The longest lease granted; longer requests get this.
    std::chrono::milliseconds max_lease{600'000};

    /// Field by field.
    friend bool operator==(const agent_limits&, const agent_limits&) = default;
};

}  // namespace cordma
