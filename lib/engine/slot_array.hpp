#pragma once
/// A connection's work slots, made on first use.
///
/// One slot per queue entry is reserved when the connection is made, but a
/// slot is constructed (its memory first touched) only when the connection
/// first needs it. A connection's 127 + 127 slots are 103 KiB, 26 pages
/// whose first touch is a page fault each; a storm of connections that
/// each use a few slots paid for every page (measured: 2,560 more minor
/// faults per 100 connections on each side than with 1 + 1 queues, and a
/// storm at 0.57x cmtime's rate against 1.0x; 0.71x with this). Slots made
/// stay made until the connection goes.
///
/// The slots have a mapping of their own (mmap), marked MADV_NOHUGEPAGE,
/// not a block of malloc's heap: with transparent huge pages set to
/// `always` (Debian's default), khugepaged collapses any 2 MiB range of the
/// heap with one page touched into a huge page, every byte resident, and
/// the pages never touched became resident anyway, every 10 s a few more
/// (measured in the faults soak: +9 MiB over 25 s, all of it huge pages).
/// munmap gives the pages back whole when the connection goes.

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <cerrno>
#include <cstddef>
#include <new>
#include <string>
#include <system_error>

#include "engine/work_slot.hpp"

namespace cordma::detail {

class slot_array {
public:
    explicit slot_array(std::size_t capacity) : capacity_(capacity), bytes_(mapped_bytes(capacity)) {
        void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            throw std::system_error(errno, std::generic_category(),
                                    "mmap of a connection's " + std::to_string(capacity) + " work slots");
        // Advice only: a kernel without THP refuses it, and that is fine.
        (void)::madvise(p, bytes_, MADV_NOHUGEPAGE);
        slots_ = static_cast<work_slot*>(p);
#if defined(__SANITIZE_ADDRESS__)
        // LeakSanitizer scans malloc's blocks, not a mapping of our own:
        // what only a slot points to (an orphan's buffers, an operation's
        // frame) would be reported leaked.
        __lsan_register_root_region(p, bytes_);
#endif
    }
    slot_array(const slot_array&) = delete;
    slot_array& operator=(const slot_array&) = delete;
    ~slot_array() {
        for (std::size_t i = 0; i < made_; ++i)
            slots_[i].~work_slot();
#if defined(__SANITIZE_ADDRESS__)
        __lsan_unregister_root_region(slots_, bytes_);
#endif
        ::munmap(slots_, bytes_);
    }

    /// Slots there may be (the queue's entries).
    std::size_t capacity() const noexcept { return capacity_; }
    /// Slots made so far; they are [begin(), end()).
    std::size_t made() const noexcept { return made_; }
    bool full() const noexcept { return made_ == capacity_; }
    /// Makes the next slot (default-constructed), or nullptr if all are made.
    work_slot* make() noexcept {
        if (made_ == capacity_)
            return nullptr;
        return ::new (static_cast<void*>(slots_ + made_++)) work_slot();
    }

    work_slot* begin() noexcept { return slots_; }
    work_slot* end() noexcept { return slots_ + made_; }
    work_slot& operator[](std::size_t i) noexcept { return slots_[i]; }

private:
    // mmap and munmap round the length up to whole pages themselves; a
    // length of 0 is refused, so a queue of no entries maps one page.
    static std::size_t mapped_bytes(std::size_t capacity) noexcept {
        return capacity == 0 ? sizeof(work_slot) : capacity * sizeof(work_slot);
    }

    work_slot* slots_ = nullptr;
    std::size_t capacity_;
    std::size_t bytes_;
    std::size_t made_ = 0;
};

}  // namespace cordma::detail
