#pragma once
/// Registered buffers for the frames cordma::rpc sends, reused: a free list
/// per power-of-two size, so a steady stream of calls allocates nothing
/// after the first few. Event listener thread only.

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include <cordma/local_mr.hpp>

namespace cordma::detail {

class frame_buffers {
public:
    explicit frame_buffers(std::shared_ptr<memory_pool> pool) : pool_(std::move(pool)) {}

    /// A buffer of at least `size` bytes (from the free list, or the pool).
    local_mr take(std::size_t size);
    /// Back for reuse (or to the pool, past `kept_per_size` of its size).
    void give(local_mr buffer) noexcept;

    static constexpr std::size_t smallest = 256;
    static constexpr std::size_t kept_per_size = 64;

private:
    static std::size_t size_class(std::size_t size) noexcept;
    std::shared_ptr<memory_pool> pool_;
    std::array<std::vector<local_mr>, 24> free_{};
};

}  // namespace cordma::detail
