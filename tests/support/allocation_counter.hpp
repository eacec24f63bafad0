#pragma once
/// Counts global operator new / operator delete calls, so a test can prove a
/// code path allocates exactly what it should (one frame per task, nothing
/// per RDMA operation or per resume).
///
/// Setup: exactly one translation unit of the test executable defines
/// CORDMA_DEFINE_ALLOCATION_COUNTER before including this header. That unit
/// replaces every form of the global operator new and delete (plain, array,
/// nothrow, aligned, sized) with counting versions over malloc/free, for the
/// whole program. The linker enforces "exactly one": with none, the counter
/// functions are undefined references; with two, they are duplicates.
///
///     #define CORDMA_DEFINE_ALLOCATION_COUNTER
///     #include "support/allocation_counter.hpp"
///
///     cordma::testing::allocation_counter counter;
///     co_await conn.write(remote, local);
///     auto const made = counter.this_thread().allocations;  // read first:
///     CHECK(made == 0);                                      // CHECK may allocate
///
/// What is counted: calls to the global allocation functions, so every
/// new-expression without a class-specific operator new, standard containers
/// and strings, std::function's heap case, and coroutine frames (a promise
/// without its own operator new). Not counted: malloc called directly (C
/// libraries such as libibverbs, and the C++ runtime's exception objects).
///
/// Per thread or for all threads: this_thread() counts only the calling
/// thread, so unrelated threads cannot disturb it; all_threads() includes
/// work resumed elsewhere, such as coroutines resumed on the event_listener
/// thread, and needs no other thread to be allocating meanwhile.

#include <cstdint>

namespace cordma::testing {

/// Calls to the global allocation and deallocation functions. Deleting a null
/// pointer is not counted.
struct allocation_stats {
    std::uint64_t allocations = 0;
    std::uint64_t deallocations = 0;
};

/// Totals since the program started, by the calling thread.
allocation_stats this_thread_allocation_stats() noexcept;

/// Totals since the program started, by every thread.
allocation_stats all_threads_allocation_stats() noexcept;

/// Counts the allocations made between its construction and each query.
class allocation_counter {
public:
    allocation_counter() noexcept
        : thread_start_(this_thread_allocation_stats()), all_start_(all_threads_allocation_stats()) {}

    /// By the calling thread since construction. Call it on the thread that
    /// constructed the counter.
    allocation_stats this_thread() const noexcept { return since(thread_start_, this_thread_allocation_stats()); }

    /// By every thread since construction.
    allocation_stats all_threads() const noexcept { return since(all_start_, all_threads_allocation_stats()); }

private:
    static allocation_stats since(allocation_stats start, allocation_stats now) noexcept {
        return {now.allocations - start.allocations, now.deallocations - start.deallocations};
    }

    allocation_stats thread_start_;
    allocation_stats all_start_;
};

}  // namespace cordma::testing

#ifdef CORDMA_DEFINE_ALLOCATION_COUNTER

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace cordma::testing {
namespace {

// Plain integers with constant initialization: operator new runs before
// main, during thread start-up and exit, so nothing here may need a
// constructor or destructor.
thread_local std::uint64_t thread_allocations = 0;
thread_local std::uint64_t thread_deallocations = 0;
constinit std::atomic<std::uint64_t> all_allocations{0};
constinit std::atomic<std::uint64_t> all_deallocations{0};

void count_allocation() noexcept {
    ++thread_allocations;
    all_allocations.fetch_add(1, std::memory_order_relaxed);
}

void count_deallocation(void* p) noexcept {
    if (p == nullptr)
        return;
    ++thread_deallocations;
    all_deallocations.fetch_add(1, std::memory_order_relaxed);
}

// Returns null instead of throwing; the callers decide.
void* try_allocate(std::size_t size, std::size_t alignment) noexcept {
    // operator new(0) must return a distinct pointer; malloc(0) need not.
    if (size == 0)
        size = 1;
    for (;;) {
        void* p = nullptr;
        if (alignment <= __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
            p = std::malloc(size);
        } else if (::posix_memalign(&p, alignment, size) != 0) {
            p = nullptr;
        }
        if (p != nullptr)
            return p;
        // The standard's loop: give the new_handler a chance to free memory.
        std::new_handler handler = std::get_new_handler();
        if (handler == nullptr)
            return nullptr;
        try {
            handler();
        } catch (...) {
            return nullptr;
        }
    }
}

void* allocate(std::size_t size, std::size_t alignment) {
    count_allocation();
    if (void* p = try_allocate(size, alignment))
        return p;
    throw std::bad_alloc{};
}

void* allocate_nothrow(std::size_t size, std::size_t alignment) noexcept {
    count_allocation();
    return try_allocate(size, alignment);
}

void deallocate(void* p) noexcept {
    count_deallocation(p);
    std::free(p);
}

constexpr std::size_t default_alignment = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

}  // namespace

allocation_stats this_thread_allocation_stats() noexcept { return {thread_allocations, thread_deallocations}; }

allocation_stats all_threads_allocation_stats() noexcept {
    return {all_allocations.load(std::memory_order_relaxed), all_deallocations.load(std::memory_order_relaxed)};
}

}  // namespace cordma::testing

// The replaceable global allocation functions ([new.delete]). Every form is
// replaced, rather than trusting the library's defaults to forward to
// operator new(size_t): libstdc++'s aligned forms do not.
void* operator new(std::size_t size) { return cordma::testing::allocate(size, cordma::testing::default_alignment); }
void* operator new[](std::size_t size) { return cordma::testing::allocate(size, cordma::testing::default_alignment); }
void* operator new(std::size_t size, std::align_val_t alignment) {
    return cordma::testing::allocate(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
    return cordma::testing::allocate(size, static_cast<std::size_t>(alignment));
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
    return cordma::testing::allocate_nothrow(size, cordma::testing::default_alignment);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
    return cordma::testing::allocate_nothrow(size, cordma::testing::default_alignment);
}
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
    return cordma::testing::allocate_nothrow(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
    return cordma::testing::allocate_nothrow(size, static_cast<std::size_t>(alignment));
}

void operator delete(void* p) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p) noexcept { cordma::testing::deallocate(p); }
void operator delete(void* p, std::size_t) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p, std::size_t) noexcept { cordma::testing::deallocate(p); }
void operator delete(void* p, std::align_val_t) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p, std::align_val_t) noexcept { cordma::testing::deallocate(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { cordma::testing::deallocate(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { cordma::testing::deallocate(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { cordma::testing::deallocate(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { cordma::testing::deallocate(p); }

#endif  // CORDMA_DEFINE_ALLOCATION_COUNTER
