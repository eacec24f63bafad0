#pragma once
/// \file
/// Structured and fire-and-forget ways to start tasks without awaiting them
/// one at a time.
///
///     cordma::task_group group;
///     for (auto& conn : connections)
///         group.spawn(serve(conn));
///     co_await group.join();  // rethrows the first failure

#include <cordma/export.hpp>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>

#include <cordma/detail/spawn.hpp>
#include <cordma/task.hpp>

namespace cordma {

/// A set of running tasks that are waited for together.
///
/// - spawn(t) starts t at once, on the calling thread, and returns when t
///   finishes or first suspends. Its later parts run wherever it is resumed.
/// - co_await join() resumes when every task spawned since the previous join
///   has finished, then rethrows the first exception any of them threw (later
///   ones are discarded). Errors are never swallowed.
/// - spawn may be called from any thread, including from inside a member
///   task, but not concurrently with the completion of a join that could
///   otherwise have finished. At most one join at a time.
/// - After join() completes the group is empty and may be reused.
/// - Destroying a group that has had a task spawned since its last completed
///   join is a programming error: like a joinable std::thread, the destructor
///   prints a message to stderr and calls std::terminate. That holds even if
///   the tasks happen to have finished, so the bug shows whatever the timing.
///   When a coroutine can leave the group's scope by an exception, join first.
/// - Costs one driver coroutine frame per spawn, freed when the task finishes.
class CORDMA_API task_group {
public:
    task_group() noexcept = default;

    /// Members refer to their group, so it cannot move.
    task_group(const task_group&) = delete;
    task_group& operator=(const task_group&) = delete;

    /// Terminates the program if a spawned task was not joined; see above.
    ~task_group() {
        if (state_.needs_join()) {
            std::fputs("cordma::task_group destroyed before co_await join() completed "
                       "for every spawned task; terminating\n",
                       stderr);
            std::terminate();
        }
    }

    /// Starts `member` now and tracks it until join(). Throws std::bad_alloc
    /// if the driver frame cannot be allocated; the task is then destroyed
    /// without running and the group is unchanged.
    void spawn(task<void> member) { detail::run_group_member(std::move(member), state_); }

    /// An awaitable that resumes when every member has finished, on the thread
    /// that finished the last one (or at once, on the awaiting thread, if they
    /// all have), then rethrows the first member exception.
    class join_awaiter {
    public:
        /// Made by task_group::join(); refers to the group, which must
        /// outlive the co_await.
        explicit join_awaiter(detail::group_state& state) noexcept : state_(&state) {}
        /// True when every member has finished already (no suspension).
        bool await_ready() const noexcept { return state_->all_finished(); }
        /// Registers the joiner; returns false (resume at once) if the last
        /// member finished meanwhile.
        bool await_suspend(std::coroutine_handle<> joiner) noexcept { return state_->suspend_joiner(joiner); }
        /// Empties the group and rethrows the first member's exception, if
        /// any.
        void await_resume() { state_->joined(); }

    private:
        detail::group_state* state_;
    };

    /// Waits for every member spawned since the last join, as join_awaiter
    /// describes: `co_await group.join();`. At most one join at a time.
    [[nodiscard]] join_awaiter join() noexcept { return join_awaiter{state_}; }

private:
    detail::group_state state_;
};

/// Starts `work` now, on the calling thread, and lets it run on its own: no
/// one awaits it, and it frees itself when it finishes.
///
/// If `work` throws, on_error is called with the exception on the thread that
/// finished it. The default prints the exception's what() to stderr and calls
/// std::terminate: a failure is never silently dropped. If on_error throws,
/// the program terminates too.
///
/// Throws std::invalid_argument if on_error is empty, and std::bad_alloc if the
/// driver frame cannot be allocated; in both cases `work` never runs.
inline void spawn_detached(task<void> work,
                           std::function<void(std::exception_ptr)> on_error = detail::terminate_on_error) {
    if (!on_error)
        throw std::invalid_argument("cordma::spawn_detached: on_error is empty");
    detail::run_detached(std::move(work), std::move(on_error));
}

}  // namespace cordma
