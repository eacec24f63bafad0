#pragma once
/// The process's watch on memory leaving its address space: munmap,
/// mremap, madvise(MADV_DONTNEED / MADV_REMOVE), a brk that shrinks, and
/// free() handing pages back through any of them. A cache of memory
/// registrations needs it: a registration pins the pages it was made on,
/// so after a free() and a new malloc() at the same address the cached
/// keys would still name the old pages, and RDMA would move bytes the
/// program can no longer see.
///
/// The kernel says so through a userfaultfd that watches the ranges
/// (UFFD_FEATURE_EVENT_UNMAP, _REMOVE, _REMAP; registered in write-protect
/// mode with nothing protected, so no access ever faults into it; as an
/// unprivileged user, with UFFD_USER_MODE_ONLY). The call that unmaps
/// waits in the kernel until the event has been read, so one thread of
/// the watch's own reads them, and for that it takes no lock and
/// allocates nothing: an application thread that unmaps while holding a
/// lock of a cache, or inside malloc, never waits on it. The ranges it
/// reads go into a fixed ring; caches read the ring when they look up.
///
/// settle() closes the gap between the kernel's read and the ring: after
/// munmap() returns, a lookup that calls settle() first sees that range.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace cordma::detail {

class unmap_watch {
public:
    /// A range that left the address space: [start, end).
    struct range {
        std::uintptr_t start = 0;
        std::uintptr_t end = 0;
    };
    /// How many ranges the ring keeps; a reader further behind than this
    /// has missed some, and must drop everything it holds.
    static constexpr std::size_t ring_size = 1024;

    /// The process's watch, its thread started on first use; nullptr when
    /// the kernel gives none (unavailable() says why). After fork(), the
    /// child gets a watch of its own.
    static unmap_watch* get() noexcept;
    /// Why get() gave nullptr ("" when it did not).
    static std::string unavailable();

    /// Watches the page-aligned [start, end). False when the kernel cannot
    /// watch that memory: a file mapping other than shmem, memory another
    /// userfaultfd watches, a range with a hole.
    bool watch(std::uintptr_t start, std::uintptr_t end) noexcept;
    /// Stops watching [start, end) once no other watch() of the same
    /// pages is left.
    void unwatch(std::uintptr_t start, std::uintptr_t end) noexcept;

    /// Waits until every unmap the kernel has begun to report is in the
    /// ring: one whose event is not yet read (the kernel's mmap_changing,
    /// which makes UFFDIO_WRITEPROTECT answer EAGAIN until the unmapping
    /// thread has been let go; `page` is any page-aligned address), and
    /// one read and not yet written. So a lookup after it misses no unmap
    /// that finished before it, on any thread: another thread's munmap
    /// whose address an mmap of this thread already got back included.
    void settle(std::uintptr_t page) const noexcept;
    /// False in a child forked after this watch was made: the child's
    /// memory is not watched by it (a cache must take the child's own).
    bool current() const noexcept;
    /// How many ranges have been written to the ring so far.
    std::uint64_t written() const noexcept { return written_.load(std::memory_order_acquire); }
    /// The `index`th range written (index < written()); false when the
    /// ring has moved past it (the reader must drop everything).
    bool read(std::uint64_t index, range& out) const noexcept;

    unmap_watch(const unmap_watch&) = delete;
    unmap_watch& operator=(const unmap_watch&) = delete;

private:
    explicit unmap_watch(int fd) noexcept;
    void run() noexcept;
    void publish(std::uintptr_t start, std::uintptr_t end) noexcept;

    int fd_;
    unsigned generation_;
    /// Events taken from the kernel and not yet in the ring (0 or 1).
    mutable std::atomic<int> reading_{0};
    std::atomic<std::uint64_t> written_{0};
    struct slot {
        std::atomic<std::uint64_t> tag{~std::uint64_t{0}};
        std::atomic<std::uintptr_t> start{0};
        std::atomic<std::uintptr_t> end{0};
    };
    slot ring_[ring_size];

    /// Every watch() not yet undone, by start (several may name the same
    /// pages); only application threads touch it, never the reading one.
    std::mutex watches_mutex_;
    std::multimap<std::uintptr_t, std::uintptr_t> watches_;
};

}  // namespace cordma::detail
