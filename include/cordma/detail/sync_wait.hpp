#pragma once
/// The machinery behind cordma::sync_wait: a driver coroutine that awaits the
/// awaitable and signals an event the blocked thread waits on.

#include <cordma/export.hpp>
#include <condition_variable>
#include <coroutine>
#include <mutex>
#include <utility>

#include <cordma/detail/awaitable_traits.hpp>
#include <cordma/detail/coroutine_result.hpp>
#include <cordma/detail/frame_cache.hpp>

namespace cordma::detail {

/// A one-shot event one thread waits on and another sets.
///
/// A mutex and condition variable rather than std::atomic::wait: the waiter
/// destroys the event as soon as it sees it set, and notify_one() on an atomic
/// after the store would touch an object the waiter may already have
/// destroyed. Notifying under the lock means the waiter cannot return until
/// set() has released the mutex, after which set() touches nothing.
class CORDMA_API sync_wait_event {
public:
    void set() noexcept {
        std::lock_guard lock{mutex_};
        set_ = true;
        changed_.notify_one();
    }

    void wait() noexcept {
        std::unique_lock lock{mutex_};
        changed_.wait(lock, [this] { return set_; });
    }

private:
    std::mutex mutex_;
    std::condition_variable changed_;
    bool set_ = false;
};

/// Awaits one awaitable, keeps its result, and sets an event when done; stays
/// suspended at the end so the result can be taken. Its owner destroys it.
template <class R>
class sync_wait_task {
public:
    class promise_type : public coroutine_result<R>, public frame_cached {
        struct final_awaiter {
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<promise_type> self) const noexcept {
                // The frame is suspended already; the waiting thread may
                // destroy it the moment the event is set, so nothing may
                // follow set().
                self.promise().done_->set();
            }
            void await_resume() const noexcept {}
        };

    public:
        sync_wait_task get_return_object() noexcept {
            return sync_wait_task{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        final_awaiter final_suspend() const noexcept { return {}; }

    private:
        friend sync_wait_task;
        sync_wait_event* done_ = nullptr;
    };

    sync_wait_task(sync_wait_task&& other) noexcept : frame_(std::exchange(other.frame_, {})) {}
    sync_wait_task& operator=(sync_wait_task&&) = delete;

    ~sync_wait_task() {
        if (frame_)
            frame_.destroy();
    }

    void start(sync_wait_event& done) noexcept {
        frame_.promise().done_ = &done;
        frame_.resume();
    }

    R take() { return frame_.promise().take(); }

private:
    explicit sync_wait_task(std::coroutine_handle<promise_type> frame) noexcept : frame_(frame) {}

    std::coroutine_handle<promise_type> frame_;
};

template <class A>
using sync_wait_result_t = stored_result_t<await_result_t<A>>;

// The awaitable is taken by reference: sync_wait's argument outlives the
// driver, which is destroyed before sync_wait returns.
template <class A>
    requires std::is_void_v<await_result_t<A>>
sync_wait_task<void> make_sync_wait_task(A&& awaitable) {
    co_await std::forward<A>(awaitable);
}

template <class A>
    requires(!std::is_void_v<await_result_t<A>>)
sync_wait_task<sync_wait_result_t<A>> make_sync_wait_task(A&& awaitable) {
    co_return co_await std::forward<A>(awaitable);
}

}  // namespace cordma::detail
