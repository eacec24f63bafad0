#include "connect/cq_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <cordma/device.hpp>

namespace cordma::detail {

cq_pool::cq_pool(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<device_context> device,
                 int first_entries, const char* what)
    : el_(std::move(el)), device_(std::move(device)), max_entries_(std::max(1, device_->attributes().max_cqe)),
      first_entries_(first_entries), what_(what) {
    shares_.push_back({el_->create_cq(device_, std::clamp(first_entries_, 1, max_entries_)), 0});
}

std::shared_ptr<completion_queue> cq_pool::take(int entries) {
    if (entries > max_entries_)
        throw std::invalid_argument(std::string("builder::capacity: a queue pair with ") + std::to_string(entries) +
                                    " " + what_ + " work requests needs more room than one completion queue of " +
                                    device_->name() + " holds (max_cqe " + std::to_string(max_entries_) +
                                    "); ask for fewer");
    // First the CQ that already has room, then one that can grow to hold it
    // (doubling, to resize rarely), then a new one.
    for (share& s : shares_)
        if (s.in_use + entries <= s.cq->entries()) {
            s.in_use += entries;
            return s.cq;
        }
    for (share& s : shares_)
        if (s.in_use + entries <= max_entries_) {
            s.cq->resize(std::min(max_entries_, std::max(s.in_use + entries, s.cq->entries() * 2)));
            s.in_use += entries;
            return s.cq;
        }
    share fresh{el_->create_cq(device_, std::clamp(std::max(first_entries_, entries), 1, max_entries_)), entries};
    shares_.push_back(fresh);
    return fresh.cq;
}

void cq_pool::give_back(const completion_queue* cq, int entries) noexcept {
    if (entries == 0)
        return;
    for (std::size_t i = 0; i < shares_.size(); ++i) {
        if (shares_[i].cq.get() != cq)
            continue;
        shares_[i].in_use -= entries;
        // Its QPs are gone (each holds its CQ, so this drops only the
        // pool's reference); the first stays for the next connection.
        if (shares_[i].in_use == 0 && i != 0)
            shares_.erase(shares_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
    }
}

}  // namespace cordma::detail
