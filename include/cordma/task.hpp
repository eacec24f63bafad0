#pragma once
/// \file
/// cordma::task<T>: the coroutine type cordma code is written in.
///
///     cordma::task<std::size_t> copy_once(cordma::connection& conn, ...) {
///         co_await conn.write(local, remote);
///         co_return local.size();
///     }
///
/// A task is lazy: calling a task-returning function allocates its coroutine
/// frame and runs nothing; the body starts when the task is first co_awaited.
/// To start tasks without awaiting them one by one, use when_all, task_group
/// or spawn_detached; to wait for one from ordinary code, use sync_wait.

#include <cordma/export.hpp>
#include <cassert>
#include <coroutine>
#include <type_traits>
#include <utility>

#include <cordma/detail/coroutine_result.hpp>
#include <cordma/detail/frame_cache.hpp>

namespace cordma {

template <class T = void>
class task;

namespace detail {

/// What every task promise shares: the lazy start and the hand-back to the
/// awaiting coroutine.
class CORDMA_API task_promise_base : public frame_cached {
    struct final_awaiter {
        bool await_ready() const noexcept { return false; }

        template <class Promise>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> finished) const noexcept {
            // Symmetric transfer: returning the awaiter's handle instead of
            // calling resume() on it is a tail call, so a million tasks that
            // complete synchronously in a row use no more stack than one.
            std::coroutine_handle<> continuation =
                static_cast<task_promise_base&>(finished.promise()).continuation_;
            return continuation ? continuation : std::noop_coroutine();
        }

        void await_resume() const noexcept {}
    };

public:
    std::suspend_always initial_suspend() const noexcept { return {}; }
    final_awaiter final_suspend() const noexcept { return {}; }

    void set_continuation(std::coroutine_handle<> continuation) noexcept { continuation_ = continuation; }

private:
    // Written by the awaiter before the body starts and read when the body
    // ends, possibly on another thread: whatever moved the coroutine across
    // threads (a completion queue, a std::thread) already orders the two, so
    // this needs no atomics.
    std::coroutine_handle<> continuation_;
};

template <class T>
class task_promise : public task_promise_base, public coroutine_result<T> {
public:
    task<T> get_return_object() noexcept;
};

}  // namespace detail

/// A lazily started coroutine producing a T (or a T&, or nothing for void).
///
/// Contract:
/// - Execution does not start until the task is co_awaited. The awaiting
///   coroutine suspends, the task's body runs on the awaiting thread until it
///   finishes or suspends; when it finishes, the awaiter resumes on the thread
///   that finished it (for cordma operations, usually the event_listener
///   thread), inline and without a hop.
/// - co_await yields the value the body co_returned, or rethrows the exception
///   that escaped the body.
/// - A task is awaited at most once, as an rvalue: `co_await std::move(t)` or
///   `co_await make_task()`. Awaiting consumes it (valid() becomes false).
/// - Move-only. Owns its coroutine frame, the only memory it needs: the
///   result is stored in the frame, and awaiting or resuming allocates
///   nothing. The frame comes from the thread's frame cache
///   (detail/frame_cache.hpp), so once a coroutine of its size has ended on
///   the thread, making one allocates nothing either. The frame ends when the
///   task is destroyed unstarted, or at the end of the full-expression
///   containing the co_await that awaited it.
/// - Resuming the awaiter and starting the body are both symmetric transfers:
///   chains of synchronous completions do not grow the stack. The compiler
///   turns these into tail calls; GCC does so only with
///   -foptimize-sibling-calls (on from -O2, off at -O0, -Og and -O1) and not
///   in code compiled with AddressSanitizer's stack instrumentation. Without
///   it each synchronous completion costs a few stack frames until the
///   awaiting coroutine next really suspends. The transfers happen in the
///   awaiting coroutine, so in the user's code: cordma builds itself with
///   -foptimize-sibling-calls whatever the build type, but neither cordma.pc
///   nor the CMake package forces it on users (a library does not choose
///   its users' code generation). Users who build with g++ below -O2 and
///   await long chains of operations that complete at once (a loop of
///   operations on an idle connection, task<> calling task<> thousands
///   deep) should add -foptimize-sibling-calls themselves.
template <class T>
class [[nodiscard]] task {
    static_assert(!std::is_rvalue_reference_v<T>, "task<T&&> is not supported: use task<T>");

public:
    /// The coroutine machinery's promise (an implementation detail).
    using promise_type = detail::task_promise<T>;
    /// What co_await on the task yields.
    using value_type = T;

    class awaiter;

    /// Takes over `other`'s frame; `other` is left invalid().
    task(task&& other) noexcept : frame_(std::exchange(other.frame_, {})) {}

    /// Destroys this task's frame if it still owns one (never awaited),
    /// then takes over `other`'s; `other` is left invalid().
    task& operator=(task&& other) noexcept {
        if (this != &other) {
            destroy();
            frame_ = std::exchange(other.frame_, {});
        }
        return *this;
    }

    task(const task&) = delete;
    task& operator=(const task&) = delete;

    /// Destroys the frame if the task still owns one (it was never awaited).
    ~task() { destroy(); }

    /// True until the task is moved from or awaited.
    [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(frame_); }

    /// Starts the body; the awaiting coroutine resumes when it finishes. The
    /// returned awaiter takes over the frame. Precondition: valid().
    awaiter operator co_await() && noexcept {
        assert(frame_ && "co_await on a task that was moved from or already awaited");
        return awaiter{std::exchange(frame_, {})};
    }

    /// Awaiting consumes the task, so awaiting an lvalue is refused: write
    /// `co_await std::move(t)`.
    void operator co_await() const& = delete;

private:
    friend promise_type;

    explicit task(std::coroutine_handle<promise_type> frame) noexcept : frame_(frame) {}

    void destroy() noexcept {
        if (frame_)
            frame_.destroy();
    }

    std::coroutine_handle<promise_type> frame_;
};

/// The object a co_await on a task suspends in. It owns the task's frame from
/// the moment it is created, so the frame lives exactly as long as the
/// co_await expression, even if the awaiting coroutine is destroyed while
/// suspended.
template <class T>
class task<T>::awaiter {
public:
    /// Takes over `frame` (made by task's operator co_await).
    explicit awaiter(std::coroutine_handle<promise_type> frame) noexcept : frame_(frame) {}

    /// Takes over `other`'s frame.
    awaiter(awaiter&& other) noexcept : frame_(std::exchange(other.frame_, {})) {}
    awaiter& operator=(awaiter&&) = delete;

    ~awaiter() {
        if (frame_)
            frame_.destroy();
    }

    /// Never ready: the body has not started yet, by construction.
    bool await_ready() const noexcept { return false; }

    /// Records `awaiting` as the continuation and starts the body by
    /// symmetric transfer (no stack growth).
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        frame_.promise().set_continuation(awaiting);
        return frame_;
    }

    /// The body's co_returned value, or rethrows the exception that escaped
    /// it.
    T await_resume() { return frame_.promise().take(); }

private:
    std::coroutine_handle<promise_type> frame_;
};

template <class T>
task<T> detail::task_promise<T>::get_return_object() noexcept {
    return task<T>{std::coroutine_handle<task_promise>::from_promise(*this)};
}

}  // namespace cordma
