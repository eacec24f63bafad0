#pragma once
/// The host part of a peer's name, as errors and metrics name peers:
/// "10.0.0.2:7471" -> "10.0.0.2", "[fe80::1]:7471" -> "[fe80::1]",
/// "10.0.0.2:7471 (agent)" -> "10.0.0.2"; anything else as it is. What the
/// agent's per-host limits and metrics' per-host sums group by.

#include <string>
#include <string_view>

namespace cordma::detail {

inline std::string peer_host(std::string_view peer) {
    peer = peer.substr(0, peer.find(' '));
    if (!peer.empty() && peer.front() == '[') {
        auto close = peer.find(']');
        return std::string(close == std::string_view::npos ? peer : peer.substr(0, close + 1));
    }
    auto colon = peer.rfind(':');
    if (colon == std::string_view::npos || peer.find(':') != colon)
        return std::string(peer);
    return std::string(peer.substr(0, colon));
}

}  // namespace cordma::detail
