// remote_mr: a region of the peer's memory its agent granted us; dropping
// it tells the owner (through our agent) that the region may be freed.
#include <cordma/remote_mr.hpp>

#include <utility>

#include "agent/agent.hpp"

namespace cordma {

remote_mr::remote_mr(remote_mr&& other) noexcept
    : agent_(std::move(other.agent_)), region_id_(std::exchange(other.region_id_, 0)), mr_(other.mr_),
      deadline_(other.deadline_), ended_(std::move(other.ended_)) {}

remote_mr& remote_mr::operator=(remote_mr&& other) noexcept {
    if (this != &other) {
        release();
        agent_ = std::move(other.agent_);
        region_id_ = std::exchange(other.region_id_, 0);
        mr_ = other.mr_;
        deadline_ = other.deadline_;
        ended_ = std::move(other.ended_);
    }
    return *this;
}

remote_mr::~remote_mr() { release(); }

void remote_mr::release() noexcept {
    if (region_id_ == 0)
        return;
    if (auto a = agent_.lock())
        a->release_held(region_id_);
    region_id_ = 0;
}

std::uint64_t remote_mr::disown() noexcept { return std::exchange(region_id_, 0); }

}  // namespace cordma
