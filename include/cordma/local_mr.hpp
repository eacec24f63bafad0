#pragma once
/// \file
/// Local memory regions: registered memory this process owns, handed out by a
/// memory_pool (or wrapping a caller's own buffer), and slices of them.
///
/// Registering memory (ibv_reg_mr) pins pages and costs tens of microseconds,
/// far too slow per operation. A memory_pool registers big chunks once and
/// hands out aligned pieces of them. A local_mr is shared ownership of such a
/// piece: the local_mr, its slices and every operation in flight that names
/// them keep it alive, so the hardware never writes into memory that was
/// handed to someone else, even if the coroutine that started the operation
/// is gone.

#include <cordma/export.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <cordma/access.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/rails.hpp>
#include <cordma/remote_slice.hpp>

namespace cordma {

class memory_pool;

namespace detail {

/// One piece of registered memory.
struct CORDMA_API mr_block {
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
    access_flags access = access_flags::none;
    // Its keys on rails 1.. (element i: rail i + 1), for the first
    // rails - 1; rail 0's are lkey and rkey (memory_pool::create with
    // several protection domains).
    std::array<std::uint32_t, max_rails - 1> rail_lkeys{};
    std::array<std::uint32_t, max_rails - 1> rail_rkeys{};
    std::uint8_t rails = 1;
    // Where it came from: a pool chunk, or a registration of its own.
    std::shared_ptr<memory_pool> pool;
    std::size_t chunk = 0;
    std::size_t offset = 0;
    std::size_t reserved = 0;
    memory_region own_registration;
    // A registration of its own on several rails: rails 1..'s, in order
    // (register_local_mr with several protection domains).
    std::vector<memory_region> rail_registrations;

    mr_block() = default;
    mr_block(const mr_block&) = delete;
    mr_block& operator=(const mr_block&) = delete;
    ~mr_block();
};

}  // namespace detail

/// A byte range within a local region. Copyable; every copy keeps the
/// region's memory alive.
class CORDMA_API local_slice {
public:
    /// An empty slice (no region, 0 bytes); operations refuse it.
    local_slice() = default;
    /// `size` bytes at `data` inside `block`, sharing its ownership. Made by
    /// local_mr and slice(); users take slices from those, not from here.
    local_slice(std::shared_ptr<detail::mr_block> block, std::byte* data, std::size_t size) noexcept
        : block_(std::move(block)), data_(data), size_(size) {}

    /// The first byte; valid while this slice (or any owner of the region)
    /// lives.
    std::byte* data() const noexcept { return data_; }
    /// Its length in bytes.
    std::size_t size() const noexcept { return size_; }
    /// The bytes, to fill before a send or write and read after a recv or
    /// read completes (not while an operation naming them is in flight).
    std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
    /// The region's local key. Precondition: not an empty slice.
    std::uint32_t lkey() const noexcept { return block_->lkey; }
    /// The region it belongs to (shared ownership); nullptr when empty.
    const std::shared_ptr<detail::mr_block>& block() const noexcept { return block_; }

    /// A sub-range; std::out_of_range (naming the region, offset and length)
    /// if it does not fit.
    local_slice slice(std::size_t offset, std::size_t length) const;
    /// From `offset` to the end; std::out_of_range if `offset` is past it.
    local_slice slice(std::size_t offset) const { return slice(offset, offset <= size_ ? size_ - offset : 0); }

    /// This range as the peer must name it (needs remote access on the region).
    remote_slice remote() const noexcept {
        return {reinterpret_cast<std::uint64_t>(data_), size_, block_->rkey, block_->access, block_->rail_rkeys,
                block_->rails};
    }

private:
    std::shared_ptr<detail::mr_block> block_;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

/// A local memory region: registered memory this process owns. Move-only;
/// its slices (and operations in flight) share ownership of the memory.
class CORDMA_API local_mr {
public:
    /// No region: operator bool is false, and only assigning one makes the
    /// accessors usable.
    local_mr() = default;
    /// Owns `block` (made by memory_pool and register_local_mr).
    explicit local_mr(std::shared_ptr<detail::mr_block> block) noexcept : block_(std::move(block)) {}
    /// Takes over `other`'s region; `other` is left empty.
    local_mr(local_mr&&) noexcept = default;
    /// Lets go of this object's region (freed once no slice or operation
    /// holds it), then takes over `other`'s.
    local_mr& operator=(local_mr&&) noexcept = default;
    local_mr(const local_mr&) = delete;
    local_mr& operator=(const local_mr&) = delete;

    /// True when it holds a region.
    explicit operator bool() const noexcept { return block_ != nullptr; }
    /// The first byte (aligned as allocate was asked). Precondition for
    /// this and the accessors below: it holds a region.
    std::byte* data() const noexcept { return block_->data; }
    /// Its length in bytes (as asked, not the pool's rounding).
    std::size_t size() const noexcept { return block_->size; }
    /// The bytes, to fill before a send or write and read after a recv or
    /// read completes (not while an operation naming them is in flight).
    std::span<std::byte> bytes() const noexcept { return {block_->data, block_->size}; }
    /// The local key this side's work requests name it with.
    std::uint32_t lkey() const noexcept { return block_->lkey; }
    /// The key a peer's one-sided operations need (meaningful only with
    /// remote access).
    std::uint32_t rkey() const noexcept { return block_->rkey; }
    /// The access its memory was registered with.
    access_flags access() const noexcept { return block_->access; }

    /// The whole region as a slice; operations take slices.
    local_slice all() const noexcept { return {block_, block_->data, block_->size}; }
    /// The whole region as a slice, so a local_mr can be passed where an
    /// operation takes one.
    operator local_slice() const noexcept { return all(); }
    /// `length` bytes from `offset`; std::out_of_range (naming the region,
    /// offset and length) if they do not fit.
    local_slice slice(std::size_t offset, std::size_t length) const { return all().slice(offset, length); }
    /// From `offset` to the end; std::out_of_range if `offset` is past it.
    local_slice slice(std::size_t offset) const { return all().slice(offset); }

    /// The region as a peer must name it (needs remote access).
    remote_slice remote() const noexcept { return all().remote(); }

private:
    std::shared_ptr<detail::mr_block> block_;
};

/// Registers memory the caller owns as a local region. The caller keeps the
/// memory valid until the local_mr, its slices and all operations naming
/// them are gone.
CORDMA_API local_mr register_local_mr(std::shared_ptr<protection_domain> pd, void* data, std::size_t size,
                           access_flags access);
/// The same on every rail of a builder (builder::rails): registered once
/// on each protection domain in `rails` (one per device, at most
/// max_rails, rail 0's first; `builder::pool()->rail_pds()` gives a
/// builder's), so the region has a key on each rail and its writes and
/// reads are striped as a pool's are (docs/rails.md). One protection
/// domain: as the overload above. Throws std::invalid_argument for none
/// or too many, verbs_error naming the rail whose registration failed.
CORDMA_API local_mr register_local_mr(const std::vector<std::shared_ptr<protection_domain>>& rails, void* data,
                                      std::size_t size, access_flags access);

/// What a builder's cache of registrations has done (builder::
/// registration_cache_size; builder::registration_cache_stats()). The
/// cache keeps registrations of the caller's own buffers that only this
/// side's work requests use (a large stream read's target, an rpc
/// call_into's response buffer, a C receive's buffer), so that reading
/// into the same buffer again does not register it again.
struct registration_cache_stats {
    /// Lookups a kept registration served.
    std::uint64_t hits = 0;
    /// Lookups that registered (and kept the registration when it fit).
    std::uint64_t misses = 0;
    /// Kept registrations dropped because their memory left the address
    /// space (munmap, free, madvise): the next lookup registers the new
    /// pages at that address.
    std::uint64_t unmapped = 0;
    /// Idle registrations given back to make room.
    std::uint64_t evicted = 0;
    /// Registrations made for one call only: larger than the cache, no
    /// idle one to give back, or memory the kernel cannot watch (a file
    /// mapping), or no watch at all (see unavailable).
    std::uint64_t not_kept = 0;
    /// Registrations kept now.
    std::size_t entries = 0;
    /// The bytes they pin (whole pages).
    std::size_t bytes = 0;
    /// The most it keeps (0: nothing is kept).
    std::size_t capacity = 0;
    /// Why nothing can be kept ("" when the cache works): the kernel gives
    /// no userfaultfd to see memory being unmapped (e.g. a container's
    /// seccomp profile), and a kept registration could then outlive its
    /// pages.
    std::string unavailable;
};

/// Registered memory in big chunks, handed out as local regions.
/// Thread-safe. Allocation is not on the per-operation path: allocate buffers
/// once and reuse them.
class CORDMA_API memory_pool : public std::enable_shared_from_this<memory_pool> {
public:
    /// A pool whose chunks are registered with `access` (local_write is
    /// added: the verbs require it with remote write and atomics), each
    /// `chunk_size` bytes (at least 4096; std::invalid_argument otherwise).
    /// Nothing is registered until the first allocate() or reserve().
    static std::shared_ptr<memory_pool> create(std::shared_ptr<protection_domain> pd,
                                               access_flags access = access_flags::all,
                                               std::size_t chunk_size = 4 << 20);
    /// A pool whose chunks are registered with every protection domain of
    /// `rails` (one per device, at most max_rails; the first is pd()), so
    /// its regions can be used on each rail of a connection (builder::
    /// rails). std::invalid_argument when `rails` is empty, longer than
    /// max_rails, or names one device twice.
    static std::shared_ptr<memory_pool> create(std::vector<std::shared_ptr<protection_domain>> rails,
                                               access_flags access = access_flags::all,
                                               std::size_t chunk_size = 4 << 20);

    ~memory_pool();

    /// A region of `size` bytes aligned to `alignment` (a power of two, at
    /// most 4096). Requests larger than the chunk size get a chunk of their
    /// own. Throws std::invalid_argument for size 0 or a bad alignment, and
    /// verbs_error when registration fails. Its bytes are NOT cleared: they
    /// are whatever the region's previous user left (fast, for buffers this
    /// side fills); for memory a peer will see, use allocate_zeroed.
    local_mr allocate(std::size_t size, std::size_t alignment = 64);
    /// As allocate, with every byte set to zero (the agent hands out only
    /// such memory).
    local_mr allocate_zeroed(std::size_t size, std::size_t alignment = 64);

    /// Registers chunks now until the pool holds at least `bytes`
    /// (rounded up to whole chunks), so later allocations up to that much
    /// do not register. Throws verbs_error as allocate does; chunks already
    /// registered stay. Thread-safe.
    void reserve(std::size_t bytes);

    /// Bytes handed out and not yet given back (each region counted with
    /// its rounding to the pool's granularity). Thread-safe.
    std::size_t bytes_in_use() const;
    /// Chunks registered so far; a pool never gives one back before it is
    /// destroyed. Thread-safe.
    std::size_t chunk_count() const;
    /// Bytes registered so far, over all chunks. Thread-safe.
    std::size_t bytes_registered() const;
    /// The size of each registration (a region larger than it gets a chunk
    /// of its own size).
    std::size_t chunk_size() const noexcept { return chunk_size_; }
    /// The access every chunk is registered with.
    access_flags access() const noexcept { return rights_; }
    /// The protection domain its chunks are registered with (rail 0's).
    const std::shared_ptr<protection_domain>& pd() const noexcept { return pds_.front(); }
    /// Every rail's protection domain, rail 0's first.
    const std::vector<std::shared_ptr<protection_domain>>& rail_pds() const noexcept { return pds_; }

private:
    friend struct detail::mr_block;
    memory_pool(std::vector<std::shared_ptr<protection_domain>> pds, access_flags access, std::size_t chunk_size);
    void release(std::size_t chunk, std::size_t offset, std::size_t size) noexcept;
    void add_chunk(std::size_t bytes, const char* call);  // mutex_ held

    struct chunk {
        std::byte* memory = nullptr;
        std::size_t size = 0;
        memory_region registration;
        std::vector<memory_region> rail_registrations;  // rails 1..
        std::map<std::size_t, std::size_t> free;  // offset -> length, coalesced
    };

    std::vector<std::shared_ptr<protection_domain>> pds_;
    access_flags rights_;
    std::size_t chunk_size_;
    mutable std::mutex mutex_;
    std::vector<chunk> chunks_;
    std::size_t bytes_in_use_ = 0;
};

}  // namespace cordma
