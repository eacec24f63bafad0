#pragma once
/// What each peer host holds from this side over all its connections of one
/// builder: the per-peer half of agent_limits (max_peer_total_bytes,
/// max_peer_regions). Shared by the agents of one runtime; event listener
/// thread only.

#include <cstddef>
#include <map>
#include <string>

namespace cordma::detail {

class agent_ledger {
public:
    struct account {
        std::size_t bytes = 0;
        std::size_t regions = 0;
    };

    account held_by(const std::string& host) const {
        auto it = accounts_.find(host);
        return it == accounts_.end() ? account{} : it->second;
    }
    void add(const std::string& host, std::size_t bytes) {
        auto& a = accounts_[host];
        a.bytes += bytes;
        a.regions += 1;
    }
    void remove(const std::string& host, std::size_t bytes) noexcept {
        auto it = accounts_.find(host);
        if (it == accounts_.end())
            return;
        it->second.bytes -= bytes;
        it->second.regions -= 1;
        if (it->second.regions == 0)
            accounts_.erase(it);
    }

private:
    std::map<std::string, account> accounts_;
};

}  // namespace cordma::detail
