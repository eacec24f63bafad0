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

// The thread's cache in one trivially destructible thread_local: in a
// shared library every thread_local access is a call (__tls_get_addr), and
// one with a destructor adds a guard's; a frame allocated and freed made six
// such calls (callgrind, 2026-11-29: 180 per stream round trip of 30
// frames), now two. Being trivially destructible, it can still be read while
// the thread's other thread_local objects are destroyed (and end
// coroutines) after the cache is emptied.
struct thread_cache {
    free_frame* lists[classes];
    std::size_t bytes;
    bool gone;         // the thread is ending: frames go to operator delete
    bool registered;   // the cleanup below is armed for this thread

    void trim() noexcept {
        for (free_frame*& head : lists)
            while (head != nullptr)
                ::operator delete(std::exchange(head, head->next));
        bytes = 0;
    }
};

// The initial-exec TLS model: the cache sits in the static TLS block, at an
// offset fixed at load time, so each access is one instruction instead of
// a call to __tls_get_addr (callgrind, 2026-12-06: 198 instructions of 18
// calls per rpc round trip, most of them here). A library loaded by dlopen
// (a Python extension) takes its 272 bytes from the surplus glibc keeps for
// such libraries (glibc.rtld.optional_static_tls, 512 bytes by default);
// were that used up, dlopen fails with "cannot allocate memory in static
// TLS block", never silently. The general-dynamic model's alternative,
// TLS descriptors (-mtls-dialect=gnu2), could clobber vector registers in
// a dlopen'd library with the glibc of Debian 12 (glibc bug 31372).
[[gnu::tls_model("initial-exec")]] thread_local thread_cache cache{};

// Empties the cache when its thread ends; made on the first frame cached.
struct cleanup {
    ~cleanup() {
        cache.gone = true;
        cache.trim();
    }
};

[[gnu::noinline, gnu::cold]] void arm_cleanup(thread_cache& tc) {
    static thread_local cleanup at_exit;
    (void)at_exit;
    tc.registered = true;
}

// Class c holds frames of (c + 1) * granule bytes.
std::size_t class_of(std::size_t size) noexcept { return (size + granule - 1) / granule - 1; }

bool cached_size(std::size_t size) noexcept { return caching && size != 0 && size <= frame_cache_max_frame; }

}  // namespace

void* frame_allocate(std::size_t size) {
    if (!cached_size(size))
        return ::operator new(size);
    std::size_t c = class_of(size);
    thread_cache& tc = cache;
    if (free_frame* f = tc.lists[c]; f != nullptr && !tc.gone) {
        tc.lists[c] = f->next;
        tc.bytes -= (c + 1) * granule;
        return f;
    }
    return ::operator new((c + 1) * granule);  // the class's size: it may be cached later
}

void frame_free(void* frame, std::size_t size) noexcept {
    if (frame == nullptr)
        return;
    thread_cache& tc = cache;
    if (!cached_size(size) || tc.gone) {
        ::operator delete(frame);
        return;
    }
    std::size_t c = class_of(size);
    if (tc.bytes + (c + 1) * granule > frame_cache_max_bytes) {
        ::operator delete(frame);
        return;
    }
    if (!tc.registered) {
        try {
            arm_cleanup(tc);
        } catch (...) {  // no memory to register the thread's cleanup: cache nothing
            ::operator delete(frame);
            return;
        }
    }
    auto* f = ::new (frame) free_frame{tc.lists[c]};
    tc.lists[c] = f;
    tc.bytes += (c + 1) * granule;
}

bool frame_cache_enabled() noexcept { return caching; }

std::size_t frame_cache_bytes() noexcept { return cache.gone ? 0 : cache.bytes; }

void frame_cache_trim() noexcept {
    if (!cache.gone)
        cache.trim();
}

}  // namespace cordma::detail
