#pragma once
/// What the calling thread's frame cache (cordma/detail/frame_cache.hpp)
/// holds, for the tests that count allocations from a known start. Not
/// exported: white-box tests link the library's internal archive.

#include <cstddef>

namespace cordma::detail {

/// Whether this build of the library caches frames (false under the
/// sanitizers).
bool frame_cache_enabled() noexcept;
/// Bytes of frames the calling thread's cache holds now.
std::size_t frame_cache_bytes() noexcept;
/// Gives every frame the calling thread's cache holds to the global
/// operator delete.
void frame_cache_trim() noexcept;

}  // namespace cordma::detail
