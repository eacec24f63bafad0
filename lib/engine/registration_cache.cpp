#include "engine/registration_cache.hpp"

#include <unistd.h>

#include <algorithm>

#include <cordma/error.hpp>

#include "core/unmap_watch.hpp"

namespace cordma::detail {

namespace {

std::uintptr_t page_size() noexcept {
    static const std::uintptr_t size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    return size;
}

local_slice register_once(const std::vector<std::shared_ptr<protection_domain>>& pds, void* data, std::size_t size) {
    return register_local_mr(pds, data, size, access_flags::local_write).all();
}

}  // namespace

registration_cache::registration_cache(std::vector<std::shared_ptr<protection_domain>> pds, std::size_t capacity)
    : pds_(std::move(pds)), capacity_(capacity) {
    counts_.capacity = capacity;
}

unmap_watch* registration_cache::started_watch() {
    if (watch_ != nullptr && !watch_->current()) {
        // A child forked with this cache: its entries name the parent's
        // registrations and the parent's watch, which sees none of the
        // child's memory. Forget them (without touching the parent's
        // watch) and take the child's own.
        entries_.clear();
        bytes_ = 0;
        watch_ = nullptr;
        watch_tried_ = false;
    }
    // Started by the first use, not with the builder: a program that never
    // reads into a large buffer of its own opens no userfaultfd and starts
    // no thread.
    if (!watch_tried_ && capacity_ != 0) {
        watch_tried_ = true;
        watch_ = unmap_watch::get();
        if (watch_ == nullptr) {
            counts_.unavailable = unmap_watch::unavailable();
        } else {
            watch_->settle(page_size());
            seen_ = watch_->written();
        }
    }
    return watch_;
}

registration_cache::~registration_cache() {
    std::lock_guard lock(mutex_);
    if (watch_ == nullptr || !watch_->current())
        return;
    while (!entries_.empty())
        drop(entries_.size() - 1);
}

local_slice registration_cache::local(void* data, std::size_t size) {
    const std::uintptr_t page = page_size();
    const auto address = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t start = address & ~(page - 1);
    const std::uintptr_t end = (address + size + page - 1) & ~(page - 1);
    std::lock_guard lock(mutex_);
    if (size == 0 || end - start > capacity_ || started_watch() == nullptr) {
        ++counts_.not_kept;
        return register_once(pds_, data, size);
    }
    // An unmap that has finished, on any thread, is in the ring after this
    // (the reading thread takes no lock of ours: waiting here is safe).
    watch_->settle(start);
    catch_up();
    auto* bytes = static_cast<std::byte*>(data);
    for (entry& e : entries_)
        if (e.start <= start && end <= e.end) {
            e.last_used = ++clock_;
            ++counts_.hits;
            return local_slice(e.block, bytes, size);
        }
    ++counts_.misses;
    // Idle registrations this one overlaps are folded into it (a buffer
    // read into at growing lengths ends up one registration, not many).
    std::uintptr_t from = start, to = end;
    for (std::size_t i = entries_.size(); i-- > 0;) {
        const entry& e = entries_[i];
        if (e.start < to && from < e.end && e.block.use_count() == 1 &&
            std::max(to, e.end) - std::min(from, e.start) <= capacity_) {
            from = std::min(from, e.start);
            to = std::max(to, e.end);
            drop(i);
            i = entries_.size();  // the range grew: look again
        }
    }
    if (!make_room(to - from) || !watch_->watch(from, to)) {
        ++counts_.not_kept;
        return register_once(pds_, data, size);
    }
    std::shared_ptr<mr_block> block;
    try {
        try {
            block = register_pages(from, to);
        } catch (const verbs_error& e) {
            // Under the locked-memory limit, what the cache keeps idle is
            // in the way: give it back and try once more.
            if (e.code() != make_error_code(errc::memlock_limit) || drop_idle() == 0)
                throw;
            block = register_pages(from, to);
        }
    } catch (const verbs_error& e) {
        watch_->unwatch(from, to);
        if (e.code() == make_error_code(errc::memlock_limit) || (from == start && to == end))
            throw;
        // The folded range took in pages that cannot be registered now
        // (made read-only since, say): this buffer alone, for this call.
        ++counts_.not_kept;
        return register_once(pds_, data, size);
    } catch (...) {
        watch_->unwatch(from, to);
        throw;
    }
    entries_.push_back(entry{from, to, block, ++clock_});
    bytes_ += to - from;
    return local_slice(std::move(block), bytes, size);
}

std::shared_ptr<mr_block> registration_cache::register_pages(std::uintptr_t start, std::uintptr_t end) {
    // register_local_mr makes the block; the cache keeps the block itself.
    return register_local_mr(pds_, reinterpret_cast<void*>(start), end - start, access_flags::local_write)
        .all()
        .block();
}

void registration_cache::catch_up() {
    const std::uint64_t written = watch_->written();
    for (; seen_ < written; ++seen_) {
        unmap_watch::range gone;
        if (!watch_->read(seen_, gone)) {
            // The ring moved past what this cache had read: any kept
            // registration may be stale.
            counts_.unmapped += entries_.size();
            while (!entries_.empty())
                drop(entries_.size() - 1);
            seen_ = written;
            return;
        }
        for (std::size_t i = entries_.size(); i-- > 0;)
            if (entries_[i].start < gone.end && gone.start < entries_[i].end) {
                ++counts_.unmapped;
                drop(i);
            }
    }
}

void registration_cache::drop(std::size_t i) {
    entry& e = entries_[i];
    watch_->unwatch(e.start, e.end);
    bytes_ -= e.end - e.start;
    if (i != entries_.size() - 1)
        e = std::move(entries_.back());
    entries_.pop_back();
}

bool registration_cache::make_room(std::size_t wanted) {
    while (bytes_ + wanted > capacity_) {
        std::size_t oldest = entries_.size();
        for (std::size_t i = 0; i < entries_.size(); ++i)
            if (entries_[i].block.use_count() == 1 &&
                (oldest == entries_.size() || entries_[i].last_used < entries_[oldest].last_used))
                oldest = i;
        if (oldest == entries_.size())
            return false;
        ++counts_.evicted;
        drop(oldest);
    }
    return true;
}

std::size_t registration_cache::drop_idle() {
    std::size_t dropped = 0;
    for (std::size_t i = entries_.size(); i-- > 0;)
        if (entries_[i].block.use_count() == 1) {
            ++counts_.evicted;
            ++dropped;
            drop(i);
        }
    return dropped;
}

registration_cache_stats registration_cache::stats() {
    std::lock_guard lock(mutex_);
    if (started_watch() != nullptr)
        catch_up();  // what was unmapped since the last lookup is not counted as kept
    registration_cache_stats s = counts_;
    s.entries = entries_.size();
    s.bytes = bytes_;
    return s;
}

}  // namespace cordma::detail
