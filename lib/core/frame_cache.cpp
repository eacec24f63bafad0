// The per-thread cache of coroutine frames (cordma/detail/frame_cache.hpp).
#include <cordma/detail/frame_cache.hpp>

#include "core/frame_cache_inspect.hpp"

#include <new>
#include <utility>

namespace cordma::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool caching = false;  // the sanitizers see every frame's life
#else
constexpr bool caching = true;
#endif

constexpr std::size_t granule = 64;
constexpr std::size_t classes = frame_cache_max_frame / granule;

struct free_frame {
    free_frame* next;
};

struct thread_cache {
    free_frame* lists[classes] = {};
    std::size_t bytes = 0;

    void trim() noexcept {
        for (free_frame*& head : lists)
            while (head != nullptr)
                ::operator delete(std::exchange(head, head->next));
        bytes = 0;
    }
    ~thread_cache();
};

// Trivially destructible, so it can still be read while the thread's other
// thread_local objects are destroyed (and end coroutines) after the cache.
thread_local bool cache_gone = false;
thread_local thread_cache cache;

thread_cache::~thread_cache() {
    cache_gone = true;
    trim();
}

// Class c holds frames of (c + 1) * granule bytes.
std::size_t class_of(std::size_t size) noexcept { return (size + granule - 1) / granule - 1; }

bool cached_size(std::size_t size) noexcept { return caching && size != 0 && size <= frame_cache_max_frame; }

}  // namespace

void* frame_allocate(std::size_t size) {
    if (!cached_size(size))
        return ::operator new(size);
    std::size_t c = class_of(size);
    if (!cache_gone) {
        thread_cache& tc = cache;
        if (free_frame* f = tc.lists[c]) {
            tc.lists[c] = f->next;
            tc.bytes -= (c + 1) * granule;
            return f;
        }
    }
    return ::operator new((c + 1) * granule);  // the class's size: it may be cached later
}

void frame_free(void* frame, std::size_t size) noexcept {
    if (frame == nullptr)
        return;
    if (!cached_size(size) || cache_gone) {
        ::operator delete(frame);
        return;
    }
    std::size_t c = class_of(size);
    thread_cache& tc = cache;
    if (tc.bytes + (c + 1) * granule > frame_cache_max_bytes) {
        ::operator delete(frame);
        return;
    }
    auto* f = ::new (frame) free_frame{tc.lists[c]};
    tc.lists[c] = f;
    tc.bytes += (c + 1) * granule;
}

bool frame_cache_enabled() noexcept { return caching; }

std::size_t frame_cache_bytes() noexcept { return cache_gone ? 0 : cache.bytes; }

void frame_cache_trim() noexcept {
    if (!cache_gone)
        cache.trim();
}

}  // namespace cordma::detail
