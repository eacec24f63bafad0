#pragma once
/// What one connection's agent granted and received (lib/agent/agent.hpp),
/// written on its event listener's thread and read from any: every live
/// agent's, plus those of agents gone, summed for the process's metrics
/// pages (cordma_agent_*), with the bytes granted now summed per peer host
/// (the memory each peer host holds pinned here).

#include <array>
#include <cstdint>
#include <string>

#include <cordma/metrics.hpp>
#include "engine/counter.hpp"

namespace cordma::detail {

/// How a grant ended.
enum class grant_end : std::uint8_t {
    released,  // the peer let it go (release_mr, or handed it back: send_remote_mr)
    expired,   // its lease ran out
    revoked,   // this side revoked it (connection::revoke_local_mr)
    closed,    // the connection ended
    unsent,    // send_local_mr could not send it
};
inline constexpr std::size_t grant_ends = 5;

class agent_tally {
public:
    /// Summed on the process's pages while it lives, folded into the
    /// closed sums when it goes. `peer_host`: the host the peer is on.
    explicit agent_tally(std::string peer_host);
    ~agent_tally();
    agent_tally(const agent_tally&) = delete;
    agent_tally& operator=(const agent_tally&) = delete;

    counter grants;         // regions granted to the peer (asked for, or sent)
    counter denied;         // the peer's requests refused
    std::array<counter, grant_ends> ended;
    counter received;       // regions the peer granted this side
    counter revoked_by_peer;
    counter granted_bytes;  // granted now (a gauge, written by store)
    counter granted_regions;

    void end(grant_end why) noexcept { ended[static_cast<std::size_t>(why)].add(); }
    /// The gauges, after a grant starts or ends.
    void set_granted(std::uint64_t bytes, std::uint64_t regions) noexcept {
        granted_bytes.set(bytes);
        granted_regions.set(regions);
    }

    const std::string& peer_host() const noexcept { return peer_host_; }
    /// Every count, read once (any thread).
    agent_counters read() const noexcept {
        agent_counters c;
        c.grants = grants.get();
        c.denied = denied.get();
        c.released = ended[static_cast<std::size_t>(grant_end::released)].get();
        c.expired = ended[static_cast<std::size_t>(grant_end::expired)].get();
        c.revoked = ended[static_cast<std::size_t>(grant_end::revoked)].get();
        c.closed = ended[static_cast<std::size_t>(grant_end::closed)].get();
        c.unsent = ended[static_cast<std::size_t>(grant_end::unsent)].get();
        c.received = received.get();
        c.revoked_by_peer = revoked_by_peer.get();
        c.granted_regions = granted_regions.get();
        c.granted_bytes = granted_bytes.get();
        return c;
    }

private:
    std::string peer_host_;
};

}  // namespace cordma::detail
