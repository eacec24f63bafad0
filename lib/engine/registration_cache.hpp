#pragma once
/// Registrations of the caller's own buffers, kept for the next time the
/// same memory is named: a large stream read, an rpc response read into
/// the caller's buffer, a C receive. Registering pins every page (about a
/// page fault per page, and an ibv_reg_mr of tens to hundreds of
/// microseconds); a program that reads into the same buffer again and
/// again pays it once.
///
/// Only registrations that this side's own work requests use (local
/// access: the target of an RDMA READ, a receive) are kept. A registration
/// a peer names (remote access) is made for the call and gone after it: a
/// kept one would leave the peer a key to this memory after the call, and
/// to whatever the program puts there next.
///
/// A kept registration is only as good as the mapping under it: after a
/// free() and a new malloc() at the same address, its keys still name the
/// old pages. The process's unmap watch (core/unmap_watch.hpp) says which
/// ranges left the address space, and every lookup applies that first.
/// Where the kernel gives no watch, nothing is kept (each call registers
/// and deregisters, as before), and stats() says why.
///
/// Thread-safe. Bounded: at most `capacity` bytes registered, least
/// recently used idle registrations given back first; one in use (a slice
/// of it alive) is never taken from its user.

#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace cordma::detail {

class unmap_watch;

class registration_cache {
public:
    /// Keeps at most `capacity` bytes of registrations on `pds` (0: none):
    /// each registered on every one of them, rail 0's first (builder::
    /// rails; one without rails).
    registration_cache(std::vector<std::shared_ptr<protection_domain>> pds, std::size_t capacity);
    ~registration_cache();
    registration_cache(const registration_cache&) = delete;
    registration_cache& operator=(const registration_cache&) = delete;

    /// `size` bytes at `data`, registered for this side's own work
    /// requests (local write, and local read): a kept registration that
    /// covers them, or a new one (kept when it fits). Throws verbs_error
    /// as register_local_mr does.
    local_slice local(void* data, std::size_t size);

    /// What it has done; starts the unmap watch if nothing has yet, so
    /// that `unavailable` says whether there is one.
    registration_cache_stats stats();

private:
    struct entry {
        std::uintptr_t start = 0;
        std::uintptr_t end = 0;
        std::shared_ptr<mr_block> block;
        std::uint64_t last_used = 0;
    };

    /// The process's unmap watch, asked for on first use (lock held);
    /// nullptr with capacity 0 or where the kernel gives none.
    unmap_watch* started_watch();
    /// Applies what the unmap watch has seen since the last call (lock held).
    void catch_up();
    /// Forgets entries_[i] (lock held); its registration goes when its
    /// last slice does.
    void drop(std::size_t i);
    /// Gives back idle registrations, least recently used first, until
    /// `wanted` more bytes fit (lock held). False if they cannot.
    bool make_room(std::size_t wanted);
    /// Gives back every idle registration (lock held); how many.
    std::size_t drop_idle();
    std::shared_ptr<mr_block> register_pages(std::uintptr_t start, std::uintptr_t end);

    std::vector<std::shared_ptr<protection_domain>> pds_;
    std::size_t capacity_;

    std::mutex mutex_;
    unmap_watch* watch_ = nullptr;
    bool watch_tried_ = false;
    std::vector<entry> entries_;
    std::size_t bytes_ = 0;
    std::uint64_t seen_ = 0;
    std::uint64_t clock_ = 0;
    registration_cache_stats counts_;
};

}  // namespace cordma::detail
