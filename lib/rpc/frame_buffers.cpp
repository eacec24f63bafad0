// frame_buffers: the registered send buffers of cordma::rpc's frames,
// kept per power-of-two size and reused.
#include "rpc/frame_buffers.hpp"

#include <bit>

namespace cordma::detail {

std::size_t frame_buffers::size_class(std::size_t size) noexcept {
    std::size_t rounded = std::bit_ceil(size < smallest ? smallest : size);
    return static_cast<std::size_t>(std::countr_zero(rounded) - std::countr_zero(smallest));
}

local_mr frame_buffers::take(std::size_t size) {
    std::size_t c = size_class(size);
    if (c < free_.size() && !free_[c].empty()) {
        local_mr buffer = std::move(free_[c].back());
        free_[c].pop_back();
        return buffer;
    }
    return pool_->allocate(smallest << c);
}

void frame_buffers::give(local_mr buffer) noexcept {
    if (!buffer)
        return;
    std::size_t c = size_class(buffer.size());
    if (c < free_.size() && free_[c].size() < kept_per_size && (smallest << c) == buffer.size()) {
        try {
            free_[c].push_back(std::move(buffer));
        } catch (...) {
        }
    }
}

}  // namespace cordma::detail
