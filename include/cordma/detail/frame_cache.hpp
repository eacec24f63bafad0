#pragma once
/// Where the coroutine frames of cordma's tasks and drivers come from: a
/// cache of freed frames on each thread, so a coroutine made once per
/// message (an rpc call, a stream read, a collective, a detached send)
/// allocates nothing once the thread has run one like it.
///
/// Every cordma promise type (task, when_all's children, sync_wait's,
/// task_group's and spawn_detached's drivers) inherits frame_cached, whose
/// allocation functions take a frame from the calling thread's cache, by
/// size class (multiples of 64 bytes up to frame_cache_max_frame), or from
/// the global operator new when the class is empty; a frame that ends goes
/// into the cache of the thread it ends on (whichever made it), up to
/// frame_cache_max_bytes per thread, and to the global operator delete
/// beyond. A thread's cache is freed when the thread ends. Larger frames
/// always come from, and go to, the global operator new and delete.
///
/// Built with AddressSanitizer or ThreadSanitizer, the library caches
/// nothing: every frame is a fresh allocation, so a use after the end of a
/// coroutine is still caught. (What the cache holds is visible to the
/// library's own tests only: lib/core/frame_cache_inspect.hpp.)

#include <cstddef>

#include <cordma/export.hpp>

namespace cordma::detail {

/// Frames up to this many bytes are cached.
inline constexpr std::size_t frame_cache_max_frame = 2048;
/// The most bytes of frames one thread keeps for reuse.
inline constexpr std::size_t frame_cache_max_bytes = 256 * 1024;

/// A frame of at least `size` bytes: from the calling thread's cache, else
/// from the global operator new (which may throw std::bad_alloc).
CORDMA_API void* frame_allocate(std::size_t size);
/// Ends a frame frame_allocate(size) gave: into the calling thread's cache,
/// or to the global operator delete.
CORDMA_API void frame_free(void* frame, std::size_t size) noexcept;

/// The allocation functions of cordma's promise types (see above).
struct frame_cached {
    /// A frame for a coroutine whose promise derives from this.
    static void* operator new(std::size_t size) { return frame_allocate(size); }
    /// Ends a frame operator new gave.
    static void operator delete(void* frame, std::size_t size) noexcept { frame_free(frame, size); }
};

}  // namespace cordma::detail
