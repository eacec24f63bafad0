#pragma once
/// A connection's work slots, made on first use.
///
/// One slot per queue entry is reserved when the connection is made, but a
/// slot is constructed (its memory first touched) only when the connection
/// first needs it. A connection's 127 + 127 slots are 103 KiB, 26 pages
/// whose first touch is a page fault each; a storm of connections that
/// each use a few slots paid for every page (measured: 2,560 more minor
/// faults per 100 connections on each side than with 1 + 1 queues, and a
/// storm at 0.57x cmtime's rate against 1.0x). Slots made stay made until
/// the connection goes.

#include <cstddef>
#include <memory>
#include <new>

#include "engine/work_slot.hpp"

namespace cordma::detail {

class slot_array {
public:
    explicit slot_array(std::size_t capacity)
        : slots_(std::allocator<work_slot>{}.allocate(capacity)), capacity_(capacity) {}
    slot_array(const slot_array&) = delete;
    slot_array& operator=(const slot_array&) = delete;
    ~slot_array() {
        for (std::size_t i = 0; i < made_; ++i)
            slots_[i].~work_slot();
        std::allocator<work_slot>{}.deallocate(slots_, capacity_);
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
    work_slot* slots_;
    std::size_t capacity_;
    std::size_t made_ = 0;
};

}  // namespace cordma::detail
