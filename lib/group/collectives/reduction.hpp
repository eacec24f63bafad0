#pragma once
/// Element-wise reductions: acc[i] = op(acc[i], in[i]).

#include <cstddef>

#include <cordma/group.hpp>

namespace cordma::detail {

/// `bytes` must be a multiple of the element size; `in` need not be
/// aligned (it may sit right after a frame header).
void combine(element_type type, reduce_op op, std::byte* acc, const std::byte* in, std::size_t bytes) noexcept;

}  // namespace cordma::detail
