#include <cordma/local_mr.hpp>

#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "verbs/check.hpp"
#include "verbs/slice_check.hpp"

namespace cordma {

namespace detail {

mr_block::~mr_block() {
    if (pool)
        pool->release(chunk, offset, reserved);
}

namespace {

/// Throws std::invalid_argument, naming `call`, unless every protection
/// domain in `rails` is there and on a device of its own (one per rail).
void check_one_per_device(const std::string& call, const std::vector<std::shared_ptr<protection_domain>>& rails) {
    for (std::size_t i = 0; i < rails.size(); ++i) {
        if (!rails[i])
            throw std::invalid_argument(call + ": rail " + std::to_string(i) + "'s protection domain is null");
        for (std::size_t j = 0; j < i; ++j)
            if (rails[j]->device()->native_handle() == rails[i]->device()->native_handle())
                throw std::invalid_argument(call + ": rails " + std::to_string(j) + " and " + std::to_string(i) +
                                            " are both on " + rails[i]->device()->name() +
                                            "; give one protection domain per device");
    }
}

}  // namespace

}  // namespace detail

local_slice local_slice::slice(std::size_t offset, std::size_t length) const {
    detail::check_slice(size_, offset, length, [this] {
        char text[96];
        std::snprintf(text, sizeof text, "local_mr{address=%p, length=%zu, lkey=0x%x}", static_cast<void*>(data_),
                      size_, block_ ? block_->lkey : 0);
        return std::string(text);
    });
    return {block_, data_ + offset, length};
}

local_mr register_local_mr(std::shared_ptr<protection_domain> pd, void* data, std::size_t size,
                           access_flags access) {
    auto block = std::make_shared<detail::mr_block>();
    block->own_registration = memory_region::register_memory(std::move(pd), data, size, access);
    block->data = static_cast<std::byte*>(data);
    block->size = size;
    block->lkey = block->own_registration.lkey();
    block->rkey = block->own_registration.rkey();
    block->access = access;
    return local_mr(std::move(block));
}

local_mr register_local_mr(const std::vector<std::shared_ptr<protection_domain>>& rails, void* data,
                           std::size_t size, access_flags access) {
    if (rails.empty() || rails.size() > max_rails)
        throw std::invalid_argument("register_local_mr(" + std::to_string(rails.size()) +
                                    " protection domains): give 1 to " + std::to_string(max_rails) +
                                    ", one per rail");
    detail::check_one_per_device("register_local_mr", rails);
    local_mr mr = register_local_mr(rails[0], data, size, access);
    detail::mr_block& block = *mr.all().block();
    for (std::size_t rail = 1; rail < rails.size(); ++rail) {
        try {
            block.rail_registrations.push_back(memory_region::register_memory(rails[rail], data, size, access));
        } catch (const verbs_error& e) {
            throw verbs_error(e.code(), "register_local_mr: rail " + std::to_string(rail) + " (" +
                                            rails[rail]->device()->name() + "): " + e.what());
        }
        block.rail_lkeys[rail - 1] = block.rail_registrations.back().lkey();
        block.rail_rkeys[rail - 1] = block.rail_registrations.back().rkey();
    }
    block.rails = static_cast<std::uint8_t>(rails.size());
    return mr;
}

std::shared_ptr<memory_pool> memory_pool::create(std::shared_ptr<protection_domain> pd, access_flags access,
                                                 std::size_t chunk_size) {
    if (chunk_size < 4096)
        throw std::invalid_argument("memory_pool::create(chunk_size=" + std::to_string(chunk_size) +
                                    "): chunks must be at least 4096 bytes");
    std::vector<std::shared_ptr<protection_domain>> pds;
    pds.push_back(std::move(pd));
    return create(std::move(pds), access, chunk_size);
}

std::shared_ptr<memory_pool> memory_pool::create(std::vector<std::shared_ptr<protection_domain>> rails,
                                                 access_flags access, std::size_t chunk_size) {
    auto call = [&] { return "memory_pool::create(" + std::to_string(rails.size()) + " protection domains)"; };
    if (chunk_size < 4096)
        throw std::invalid_argument("memory_pool::create(chunk_size=" + std::to_string(chunk_size) +
                                    "): chunks must be at least 4096 bytes");
    if (rails.empty() || rails.size() > max_rails)
        throw std::invalid_argument(call() + ": a pool needs 1 to " + std::to_string(max_rails) +
                                    " protection domains, one per rail");
    detail::check_one_per_device(call(), rails);
    return std::shared_ptr<memory_pool>(new memory_pool(std::move(rails), access, chunk_size));
}

memory_pool::memory_pool(std::vector<std::shared_ptr<protection_domain>> pds, access_flags access,
                         std::size_t chunk_size)
    : pds_(std::move(pds)), rights_(access | access_flags::local_write), chunk_size_(chunk_size) {}

memory_pool::~memory_pool() {
    for (auto& c : chunks_) {
        c.rail_registrations.clear();
        c.registration = memory_region();
        std::free(c.memory);
    }
}

local_mr memory_pool::allocate_zeroed(std::size_t size, std::size_t alignment) {
    local_mr region = allocate(size, alignment);
    std::memset(region.data(), 0, region.size());
    return region;
}

local_mr memory_pool::allocate(std::size_t size, std::size_t alignment) {
    if (size == 0)
        throw std::invalid_argument("memory_pool::allocate(size=0): a region needs at least one byte");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
        throw std::invalid_argument("memory_pool::allocate(size=" + std::to_string(size) + ", alignment=" +
                                    std::to_string(alignment) + "): alignment must be a power of two <= 4096");
    // Reserve in multiples of 64 bytes so neighbouring regions never share a
    // cache line (and atomics targets stay 8-byte aligned).
    std::size_t reserved = (size + 63) & ~std::size_t{63};

    std::lock_guard lock(mutex_);
    for (std::size_t index = 0;; ++index) {
        if (index == chunks_.size())
            add_chunk(std::max(chunk_size_, (reserved + 4095) & ~std::size_t{4095}),
                      ("memory_pool::allocate(size=" + std::to_string(size) + ")").c_str());
        chunk& c = chunks_[index];
        for (auto it = c.free.begin(); it != c.free.end(); ++it) {
            auto [offset, length] = *it;
            std::size_t aligned = (offset + alignment - 1) & ~(alignment - 1);
            if (aligned + reserved > offset + length)
                continue;
            c.free.erase(it);
            if (aligned > offset)
                c.free.emplace(offset, aligned - offset);
            if (aligned + reserved < offset + length)
                c.free.emplace(aligned + reserved, offset + length - aligned - reserved);
            auto block = std::make_shared<detail::mr_block>();
            block->data = c.memory + aligned;
            block->size = size;
            block->lkey = c.registration.lkey();
            block->rkey = c.registration.rkey();
            for (std::size_t rail = 0; rail < c.rail_registrations.size(); ++rail) {
                block->rail_lkeys[rail] = c.rail_registrations[rail].lkey();
                block->rail_rkeys[rail] = c.rail_registrations[rail].rkey();
            }
            block->rails = static_cast<std::uint8_t>(1 + c.rail_registrations.size());
            block->access = rights_;
            block->pool = shared_from_this();
            block->chunk = index;
            block->offset = aligned;
            block->reserved = reserved;
            bytes_in_use_ += reserved;
            return local_mr(std::move(block));
        }
    }
}

void memory_pool::add_chunk(std::size_t bytes, const char* call) {
    chunk c;
    c.memory = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    if (c.memory == nullptr)
        detail::throw_verbs_error(ENOMEM, std::string(call) + ": aligned_alloc(" + std::to_string(bytes) + ")");
    c.size = bytes;
    try {
        c.registration = memory_region::register_memory(pds_.front(), c.memory, bytes, rights_);
        for (std::size_t rail = 1; rail < pds_.size(); ++rail)
            c.rail_registrations.push_back(memory_region::register_memory(pds_[rail], c.memory, bytes, rights_));
    } catch (...) {
        c.rail_registrations.clear();
        c.registration = memory_region();
        std::free(c.memory);
        throw;
    }
    c.free.emplace(0, bytes);
    chunks_.push_back(std::move(c));
}

void memory_pool::reserve(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    std::size_t have = 0;
    for (const auto& c : chunks_)
        have += c.size;
    while (have < bytes) {
        add_chunk(chunk_size_, ("memory_pool::reserve(bytes=" + std::to_string(bytes) + ")").c_str());
        have += chunk_size_;
    }
}

std::size_t memory_pool::bytes_registered() const {
    std::lock_guard lock(mutex_);
    std::size_t have = 0;
    for (const auto& c : chunks_)
        have += c.size;
    return have;
}

void memory_pool::release(std::size_t chunk_index, std::size_t offset, std::size_t size) noexcept {
    std::lock_guard lock(mutex_);
    auto& free = chunks_[chunk_index].free;
    auto [it, inserted] = free.emplace(offset, size);
    // Coalesce with the neighbours so large requests keep fitting.
    if (auto next = std::next(it); next != free.end() && it->first + it->second == next->first) {
        it->second += next->second;
        free.erase(next);
    }
    if (it != free.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == it->first) {
            prev->second += it->second;
            free.erase(it);
        }
    }
    bytes_in_use_ -= size;
}

std::size_t memory_pool::bytes_in_use() const {
    std::lock_guard lock(mutex_);
    return bytes_in_use_;
}

std::size_t memory_pool::chunk_count() const {
    std::lock_guard lock(mutex_);
    return chunks_.size();
}

}  // namespace cordma
