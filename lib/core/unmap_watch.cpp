#include "core/unmap_watch.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

namespace cordma::detail {

namespace {

std::mutex starting;
unmap_watch* the_watch = nullptr;  // guarded by starting
unmap_watch* abandoned = nullptr;  // the parent's, in a forked child (kept reachable: no leak report)
std::atomic<unsigned> fork_generation{0};
bool tried = false;              // guarded by starting
std::string why_not;             // guarded by starting

// After fork() the child's memory is its own: the parent's userfaultfd
// watches none of it (the kernel drops the child's registrations), and its
// reading thread is not in the child. The child starts a watch of its own
// on first use; the parent's object is left behind (not freed: a cache
// made before the fork may still point at it).
void forget_in_child() noexcept {
    // The child has one thread: a lock another thread of the parent held
    // at the fork would never be released in it.
    new (&starting) std::mutex;
    if (the_watch != nullptr)
        abandoned = the_watch;
    the_watch = nullptr;
    fork_generation.fetch_add(1, std::memory_order_relaxed);
    tried = false;
    why_not.clear();
}

int open_userfaultfd(std::string& why) noexcept {
#ifdef SYS_userfaultfd
    // UFFD_USER_MODE_ONLY (Linux 5.11) is what an unprivileged process may
    // open when vm.unprivileged_userfaultfd is 0, Debian's default; it is
    // enough here (no fault is ever handled). Older kernels refuse the flag.
    int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0 && errno == EINVAL)
        fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd < 0) {
        why = std::string("userfaultfd: ") + std::strerror(errno) +
              (errno == EPERM ? " (a seccomp profile, e.g. a container's default, or vm.unprivileged_userfaultfd)"
                              : "");
        return -1;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        why = std::string("userfaultfd's UFFDIO_API (unmap, remove and remap events): ") + std::strerror(errno);
        close(fd);
        return -1;
    }
    if ((api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) == 0) {
        why = "userfaultfd without write-protect mode (Linux 5.7 or later has it)";
        close(fd);
        return -1;
    }
    return fd;
#else
    why = "no userfaultfd system call on this platform";
    return -1;
#endif
}

}  // namespace

unmap_watch* unmap_watch::get() noexcept {
    std::lock_guard lock(starting);
    if (tried)
        return the_watch;
    tried = true;
    static bool at_fork = (pthread_atfork(nullptr, nullptr, forget_in_child), true);
    (void)at_fork;
    int fd = open_userfaultfd(why_not);
    if (fd < 0)
        return nullptr;
    try {
        auto* watch = new unmap_watch(fd);
        // The reading thread takes no signal meant for the program.
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        std::thread reader([watch] { watch->run(); });
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        pthread_setname_np(reader.native_handle(), "cordma-unmap");
        reader.detach();
        the_watch = watch;  // lives as long as the process (see forget_in_child)
    } catch (const std::exception& e) {
        why_not = std::string("starting the unmap watch's thread: ") + e.what();
        close(fd);
    }
    return the_watch;
}

std::string unmap_watch::unavailable() {
    std::lock_guard lock(starting);
    return why_not;
}

unmap_watch::unmap_watch(int fd) noexcept : fd_(fd), generation_(fork_generation.load(std::memory_order_relaxed)) {}

bool unmap_watch::current() const noexcept { return generation_ == fork_generation.load(std::memory_order_relaxed); }

bool unmap_watch::watch(std::uintptr_t start, std::uintptr_t end) noexcept {
    if (!current())
        return false;
    uffdio_register reg{};
    reg.range.start = start;
    reg.range.len = end - start;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    std::lock_guard lock(watches_mutex_);
    if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0)
        return false;
    try {
        watches_.emplace(start, end);
    } catch (...) {
        // Still registered with the kernel: the range only gets watched
        // longer than needed.
    }
    return true;
}

void unmap_watch::unwatch(std::uintptr_t start, std::uintptr_t end) noexcept {
    // In a forked child the fd acts on the parent's memory: leave it be.
    if (!current())
        return;
    std::lock_guard lock(watches_mutex_);
    auto [first, last] = watches_.equal_range(start);
    for (auto it = first; it != last; ++it)
        if (it->second == end) {
            watches_.erase(it);
            break;
        }
    // Unregister the parts of [start, end) no other watch covers (a range
    // already unmapped is gone from the kernel's side: its error is moot).
    auto release = [this](std::uintptr_t from, std::uintptr_t to) {
        uffdio_range range{from, to - from};
        ioctl(fd_, UFFDIO_UNREGISTER, &range);
    };
    std::uintptr_t cursor = start;
    for (auto it = watches_.begin(); it != watches_.end() && it->first < end && cursor < end; ++it) {
        if (it->second <= cursor)
            continue;
        if (it->first > cursor)
            release(cursor, it->first);
        cursor = std::max(cursor, it->second);
    }
    if (cursor < end)
        release(cursor, end);
}

void unmap_watch::settle(std::uintptr_t page) const noexcept {
    if (!current())
        return;
    // An unmap of a watched range raises the context's mmap_changing
    // before the memory goes, and lowers it once its event has been read
    // and the unmapping thread let go; meanwhile UFFDIO_WRITEPROTECT
    // answers EAGAIN first thing. Asked with mode 0 (take protection away:
    // nothing here is ever protected) and DONTWAKE, it changes nothing.
    uffdio_writeprotect probe{};
    probe.range.start = page;
    static const std::uint64_t page_bytes = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    probe.range.len = page_bytes;
    probe.mode = UFFDIO_WRITEPROTECT_MODE_DONTWAKE;
    for (int turns = 0; ioctl(fd_, UFFDIO_WRITEPROTECT, &probe) != 0 && errno == EAGAIN; ++turns) {
        if (turns < 100) {
            sched_yield();
        } else {
            timespec pause{0, 20'000};
            nanosleep(&pause, nullptr);
        }
    }
    while (reading_.load(std::memory_order_acquire) != 0)
        reading_.wait(1, std::memory_order_acquire);
}

bool unmap_watch::read(std::uint64_t index, range& out) const noexcept {
    // A seqlock per slot: the tag says which index the slot holds, and is
    // ~0 while the reading thread rewrites it. Sequentially consistent
    // throughout (no fences, which ThreadSanitizer cannot follow): a start
    // or end read from a rewrite puts the second tag read after that
    // rewrite's first store, so it cannot see the old index.
    const slot& s = ring_[index % ring_size];
    if (s.tag.load() != index)
        return false;
    out.start = s.start.load();
    out.end = s.end.load();
    return s.tag.load() == index;
}

void unmap_watch::publish(std::uintptr_t start, std::uintptr_t end) noexcept {
    std::uint64_t index = written_.load(std::memory_order_relaxed);
    slot& s = ring_[index % ring_size];
    s.tag.store(~std::uint64_t{0});
    s.start.store(start);
    s.end.store(end);
    s.tag.store(index);
    written_.store(index + 1, std::memory_order_release);
}

// The reading thread: no lock, no allocation (see the header).
void unmap_watch::run() noexcept {
    uffd_msg messages[16];
    for (;;) {
        pollfd ready{fd_, POLLIN, 0};
        if (poll(&ready, 1, -1) < 0) {
            // Never give up: an unmapping thread waits for this one. Past
            // EINTR only a transient ENOMEM is possible.
            if (errno != EINTR) {
                timespec pause{0, 1'000'000};
                nanosleep(&pause, nullptr);
            }
            continue;
        }
        reading_.store(1, std::memory_order_seq_cst);
        for (;;) {
            ssize_t n = ::read(fd_, messages, sizeof messages);
            if (n <= 0)
                break;
            for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(uffd_msg); ++i) {
                const uffd_msg& m = messages[i];
                switch (m.event) {
                case UFFD_EVENT_UNMAP:
                case UFFD_EVENT_REMOVE:
                    publish(m.arg.remove.start, m.arg.remove.end);
                    break;
                case UFFD_EVENT_REMAP:
                    publish(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
                    break;
                case UFFD_EVENT_PAGEFAULT: {
                    // Nothing is ever write-protected, so none should come;
                    // if one does, lift the protection and let the thread go.
                    uffdio_writeprotect wp{};
                    wp.range.start = m.arg.pagefault.address & ~std::uint64_t{4095};
                    wp.range.len = 4096;
                    wp.mode = 0;
                    ioctl(fd_, UFFDIO_WRITEPROTECT, &wp);
                    break;
                }
                default:
                    break;
                }
            }
        }
        reading_.store(0, std::memory_order_release);
        reading_.notify_all();
    }
}

}  // namespace cordma::detail
