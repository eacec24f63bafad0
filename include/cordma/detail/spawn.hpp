#pragma once
/// The machinery behind cordma::task_group and cordma::spawn_detached: eager
/// driver coroutines that await a spawned task and free themselves when done,
/// and the thread-safe bookkeeping of a group.

#include <cordma/export.hpp>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <utility>

#include <cordma/task.hpp>

namespace cordma::detail {

/// Writes "<context>: <what()>" to stderr. For last words before
/// std::terminate, so it never throws and uses no iostreams.
inline void print_exception(const char* context, const std::exception_ptr& error) noexcept {
    if (!error) {
        std::fprintf(stderr, "%s\n", context);
        return;
    }
    try {
        std::rethrow_exception(error);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", context, e.what());
    } catch (...) {
        std::fprintf(stderr, "%s: an exception not derived from std::exception\n", context);
    }
}

/// spawn_detached's default error handler.
[[noreturn]] inline void terminate_on_error(std::exception_ptr error) noexcept {
    print_exception("cordma::spawn_detached: a detached task failed", error);
    std::terminate();
}

/// The bookkeeping of one task_group, safe to update from any thread.
class CORDMA_API group_state {
public:
    group_state() noexcept = default;
    group_state(const group_state&) = delete;
    group_state& operator=(const group_state&) = delete;

    /// A member's driver frame exists and is about to run.
    void member_started() noexcept {
        // Relaxed: the member's own release decrement in member_finished()
        // is what publishes its work to the joiner.
        count_.fetch_add(1, std::memory_order_relaxed);
        unjoined_.store(true, std::memory_order_relaxed);
    }

    /// Keeps the first error; later ones are dropped (join rethrows one).
    void record_error(std::exception_ptr error) noexcept {
        if (!failed_.exchange(true, std::memory_order_relaxed))
            error_ = std::move(error);
    }

    /// Called once per member, after its frame is gone, on whichever thread
    /// finished it. Returns the joiner to transfer to if this was the last
    /// member and a join is waiting. Touches nothing after the decrement
    /// unless last: otherwise the joiner may already be destroying us.
    std::coroutine_handle<> member_finished() noexcept {
        if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1)
            return joiner_;
        return std::noop_coroutine();
    }

    /// True if every member has finished (and no join is in progress).
    bool all_finished() const noexcept { return count_.load(std::memory_order_acquire) == 1; }

    /// Gives up the group's own count. Returns false if every member had
    /// finished already, and the joiner must not suspend.
    bool suspend_joiner(std::coroutine_handle<> joiner) noexcept {
        joiner_ = joiner;
        return count_.fetch_sub(1, std::memory_order_acq_rel) != 1;
    }

    /// The join completed: empties the group for reuse, and rethrows the first
    /// error any member threw since the previous join.
    void joined() {
        count_.store(1, std::memory_order_relaxed);
        unjoined_.store(false, std::memory_order_relaxed);
        if (failed_.load(std::memory_order_relaxed)) {
            failed_.store(false, std::memory_order_relaxed);
            std::rethrow_exception(std::exchange(error_, nullptr));
        }
    }

    /// True if a member was spawned since the last completed join.
    bool needs_join() const noexcept { return unjoined_.load(std::memory_order_acquire); }

private:
    // Unfinished members, plus one the group holds until a join suspends, so
    // that members finishing before the join cannot resume a joiner that is
    // not there.
    std::atomic<std::size_t> count_{1};
    std::atomic<bool> unjoined_{false};
    std::atomic<bool> failed_{false};
    std::exception_ptr error_;  // written once, by whoever set failed_
    std::coroutine_handle<> joiner_;
};

/// The driver of one task_group member: starts eagerly, reports its task's
/// exception and completion to the group, and frees its own frame.
class CORDMA_API group_member {
public:
    class promise_type : public frame_cached {
        struct final_awaiter {
            bool await_ready() const noexcept { return false; }
            std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) const noexcept {
                group_state& group = *self.promise().group_;
                // Free the frame before telling the group, so that once the
                // joiner runs every member's memory is already released.
                self.destroy();
                return group.member_finished();
            }
            void await_resume() const noexcept {}
        };

    public:
        // Counting here, once the frame is allocated, means a spawn that fails
        // to allocate leaves the group untouched.
        promise_type(task<void>&, group_state& group) noexcept : group_(&group) { group.member_started(); }

        group_member get_return_object() const noexcept { return {}; }
        std::suspend_never initial_suspend() const noexcept { return {}; }
        final_awaiter final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() const noexcept { group_->record_error(std::current_exception()); }

    private:
        group_state* group_;
    };
};

inline group_member run_group_member(task<void> member, group_state& /*group*/) {
    co_await std::move(member);
}

/// The driver of a spawn_detached task: starts eagerly and frees itself.
class CORDMA_API detached_driver {
public:
    class promise_type : public frame_cached {
    public:
        detached_driver get_return_object() const noexcept { return {}; }
        std::suspend_never initial_suspend() const noexcept { return {}; }
        std::suspend_never final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}

        // Only on_error itself can get here.
        void unhandled_exception() const noexcept {
            print_exception("cordma::spawn_detached: the on_error handler threw", std::current_exception());
            std::terminate();
        }
    };
};

inline detached_driver run_detached(task<void> work, std::function<void(std::exception_ptr)> on_error) {
    std::exception_ptr error;
    try {
        co_await std::move(work);
    } catch (...) {
        error = std::current_exception();
    }
    // Outside the handler: on_error may terminate or throw, and should not do
    // so with this exception still marked as being handled.
    if (error)
        on_error(std::move(error));
}

}  // namespace cordma::detail
