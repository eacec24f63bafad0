#pragma once
/// \file
/// cordma::pending<T>: a task started now and awaited later (MPI's
/// request, a future without a thread).
///
///     cordma::pending<void> s = cordma::start(g.send(1, buf));     // runs from here
///     cordma::pending<cordma::message_info> r = g.start_recv(2, in);
///     ...                                                         // other work
///     co_await s.wait();
///     cordma::message_info got = co_await r.wait();
///
/// start(t) runs `t` on the calling thread until it first suspends (a send
/// whose credit is there posts its frame before start returns), then lets
/// it go on by itself. wait() returns its result, or rethrows what it
/// threw, once it has finished; at once if it has. A pending that is
/// dropped without wait() lets its task run to the end; what it returns or
/// throws is dropped then.
///
/// Threads: start() and wait() are meant for the thread the task resumes
/// on (cordma's tasks: their event listener thread). The hand-over between
/// the finishing task and a waiter is atomic, so a wait() from another
/// thread is safe too; done() is a snapshot.

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

namespace cordma {

template <class T>
class pending;

namespace detail {

/// What a started task and its pending share: the result, and who waits.
template <class T>
struct pending_state {
    // nullptr: running, nobody waits; finished_mark(): done; else the
    // waiter's handle address.
    std::atomic<void*> waiter{nullptr};
    std::optional<std::conditional_t<std::is_void_v<T>, bool, T>> value;
    std::exception_ptr error;

    static void* finished_mark() noexcept { return reinterpret_cast<void*>(std::uintptr_t{1}); }
    bool done() const noexcept { return waiter.load(std::memory_order_acquire) == finished_mark(); }

    /// The task finished: wakes the waiter, if one came first.
    void finish() noexcept {
        void* w = waiter.exchange(finished_mark(), std::memory_order_acq_rel);
        if (w != nullptr && w != finished_mark())
            std::coroutine_handle<>::from_address(w).resume();
    }
};

template <class T>
task<void> drive_pending(task<T> work, std::shared_ptr<pending_state<T>> state) {
    try {
        if constexpr (std::is_void_v<T>) {
            co_await std::move(work);
            state->value.emplace(true);
        } else {
            state->value.emplace(co_await std::move(work));
        }
    } catch (...) {
        state->error = std::current_exception();
    }
    state->finish();
}

}  // namespace detail

/// Starts `work` now (see the top of this header) and returns its pending
/// result. Throws std::bad_alloc if the driver cannot be allocated (then
/// `work` never runs).
template <class T>
pending<T> start(task<T> work) {
    auto state = std::make_shared<detail::pending_state<T>>();
    spawn_detached(detail::drive_pending<T>(std::move(work), state), [](std::exception_ptr) noexcept {});
    return pending<T>(std::move(state));
}

/// The result of a task started with start() (or a group's start_send and
/// start_recv): await it with wait(), once. Move-only; an empty pending
/// (default-constructed, moved-from, or waited already) throws
/// std::logic_error from wait().
template <class T>
class pending {
public:
    /// An empty pending.
    pending() = default;
    /// Made by start().
    explicit pending(std::shared_ptr<detail::pending_state<T>> state) noexcept : state_(std::move(state)) {}

    /// False for an empty pending.
    explicit operator bool() const noexcept { return state_ != nullptr; }
    /// Whether the task has finished (wait() would not suspend).
    bool done() const noexcept { return state_ && state_->done(); }

    /// Waits for the task to finish (resuming on the thread that finished
    /// it, or at once if it has), then returns its result or rethrows its
    /// exception. Once per pending: the pending is empty afterwards.
    task<T> wait() {
        if (!state_)
            throw std::logic_error("cordma::pending::wait: nothing to wait for (empty, or waited already)");
        auto state = std::move(state_);
        co_await awaiter{state.get()};
        if (state->error)
            std::rethrow_exception(state->error);
        if constexpr (!std::is_void_v<T>)
            co_return std::move(*state->value);
    }

private:
    struct awaiter {
        detail::pending_state<T>* state;
        bool await_ready() const noexcept { return state->done(); }
        bool await_suspend(std::coroutine_handle<> h) noexcept {
            void* expected = nullptr;
            // false: the task finished meanwhile; go on at once.
            return state->waiter.compare_exchange_strong(expected, h.address(), std::memory_order_acq_rel);
        }
        void await_resume() const noexcept {}
    };

    std::shared_ptr<detail::pending_state<T>> state_;
};

}  // namespace cordma
