// A link's receives, grown and shrunk with its traffic (elastic_receives.hpp).
#include "link/elastic_receives.hpp"

#include <utility>

namespace cordma::detail {

elastic_receives::elastic_receives(std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t small_frame,
                                   std::size_t big_frame)
    : pool_(std::move(pool)), count_(count), small_frame_(small_frame), big_frame_(big_frame) {
    spare_small_.reserve(count_);
    spare_big_.reserve(count_);
}

void elastic_receives::grow() {
    if (grown_)
        return;
    if (spare_big_.empty() && big_out_ == 0) {
        local_mr region = pool_->allocate(count_ * big_frame_);
        for (std::size_t i = count_; i-- > 0;)
            spare_big_.push_back(region.slice(i * big_frame_, big_frame_));
    }
    grown_ = true;
}

void elastic_receives::refill(local_slice& buffer) noexcept {
    if (grown_) {
        if (buffer.size() < big_frame_ && !spare_big_.empty()) {
            spare_small_.push_back(std::move(buffer));  // reserved: never allocates
            buffer = std::move(spare_big_.back());
            spare_big_.pop_back();
            ++big_out_;
        }
        return;
    }
    if (buffer.size() > small_frame_ && !spare_small_.empty()) {
        spare_big_.push_back(std::move(buffer));
        buffer = std::move(spare_small_.back());
        spare_small_.pop_back();
        if (--big_out_ == 0)
            spare_big_.clear();  // every big buffer is back: their region goes
    }
}

}  // namespace cordma::detail
