#pragma once
/// A module's operations in progress, for its part of the stuck reports
/// (pending_source.hpp): each entry lives in its operation's coroutine
/// frame and links itself into its owner's list for as long as it lives
/// (O(1) in and out, no allocation), and says what it is when a report
/// asks (a virtual call per entry per report, none per operation). Event
/// listener thread only, as the reports are collected there.

#include <cstdint>
#include <vector>

#include <cordma/stuck_report.hpp>

namespace cordma::detail {

class pending_list;

/// One operation in progress; derive, and describe it.
class pending_entry {
public:
    pending_entry(const pending_entry&) = delete;
    pending_entry& operator=(const pending_entry&) = delete;

protected:
    /// Linked into `list` (which must outlive it).
    explicit pending_entry(pending_list& list) noexcept;
    ~pending_entry();
    /// Fills `out` (its age: from `now_ms`, the loop turn's coarse ms).
    virtual void describe(std::uint64_t now_ms, pending_operation& out) const = 0;

private:
    friend class pending_list;
    pending_list* list_;
    pending_entry* prev_ = nullptr;
    pending_entry* next_ = nullptr;
};

/// The entries of one owner (a server, an agent).
class pending_list {
public:
    pending_list() = default;
    pending_list(const pending_list&) = delete;
    pending_list& operator=(const pending_list&) = delete;
    /// Each entry, described, appended to `out`.
    void collect(std::uint64_t now_ms, std::vector<pending_operation>& out) const;
    bool empty() const noexcept { return head_ == nullptr; }

private:
    friend class pending_entry;
    pending_entry* head_ = nullptr;
};

inline pending_entry::pending_entry(pending_list& list) noexcept : list_(&list), next_(list.head_) {
    if (next_ != nullptr)
        next_->prev_ = this;
    list.head_ = this;
}

inline pending_entry::~pending_entry() {
    if (prev_ != nullptr)
        prev_->next_ = next_;
    else
        list_->head_ = next_;
    if (next_ != nullptr)
        next_->prev_ = prev_;
}

inline void pending_list::collect(std::uint64_t now_ms, std::vector<pending_operation>& out) const {
    for (const pending_entry* e = head_; e != nullptr; e = e->next_) {
        out.emplace_back();
        e->describe(now_ms, out.back());
    }
}

}  // namespace cordma::detail
