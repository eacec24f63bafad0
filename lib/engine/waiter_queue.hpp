#pragma once
/// Values handed to waiters in order: a connect request to an accept(), a
/// region to a receive_remote_mr(). One primitive for every "values waiting
/// for waiters" queue in cordma, with cancellation (a std::stop_token, from
/// any thread) and shutdown (close(): every waiter wakes with nothing).
/// Event listener thread only; owned through a shared_ptr (make()).

#include <coroutine>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

template <class T>
class waiter_queue : public std::enable_shared_from_this<waiter_queue<T>> {
    struct waiter {
        std::coroutine_handle<> handle;
        std::optional<T> value;
        bool done = false;
        bool cancelled = false;
    };
    struct awaiter {
        std::shared_ptr<waiter> w;
        waiter_queue* queue;
        bool await_ready() const noexcept { return w->done; }
        void await_suspend(std::coroutine_handle<> h) {
            w->handle = h;
            queue->waiters_.push_back(w);
        }
        void await_resume() const noexcept {}
    };
    // A function, not `co_await awaiter{...}`: g++ 12 destroys a braced
    // temporary awaiter twice in some coroutines.
    awaiter wait_for(std::shared_ptr<waiter> w) { return {std::move(w), this}; }

public:
    static std::shared_ptr<waiter_queue> make(std::shared_ptr<event_listener> el) {
        return std::shared_ptr<waiter_queue>(new waiter_queue(std::move(el)));
    }

    /// Hands `value` to the longest-waiting waiter, or keeps it for the next.
    /// After close() the value is returned to the caller instead.
    std::optional<T> push(T value) {
        if (closed_)
            return std::optional<T>(std::move(value));
        if (!waiters_.empty()) {
            auto w = std::move(waiters_.front());
            waiters_.pop_front();
            w->value.emplace(std::move(value));
            w->done = true;
            w->handle.resume();
            return std::nullopt;
        }
        values_.push_back(std::move(value));
        return std::nullopt;
    }

    /// Wakes every waiter with nothing; later pops return nothing at once.
    /// Returns the values nobody took, for the owner to dispose of.
    std::deque<T> close() {
        if (closed_)
            return {};
        closed_ = true;
        while (!waiters_.empty()) {
            auto w = std::move(waiters_.front());
            waiters_.pop_front();
            w->done = true;
            w->handle.resume();
        }
        return std::exchange(values_, {});
    }

    /// Like close(), but the values already there stay for later pops
    /// (regions that arrived before the connection went are still the
    /// receiver's); only then do pops return nothing.
    void close_keeping_values() {
        auto kept = std::exchange(values_, {});
        close();
        values_ = std::move(kept);
    }

    bool closed() const noexcept { return closed_; }
    /// Values waiting for a pop (a pop now would not wait).
    std::size_t ready() const noexcept { return values_.size(); }

    /// Removes the values `pred` picks (e.g. a client that went away).
    template <class Pred>
    void erase_if(Pred pred) {
        std::erase_if(values_, pred);
    }

    /// The next value, or nothing once closed. Throws operation_cancelled
    /// naming `call` and `who` if `token` is stopped first.
    task<std::optional<T>> pop(std::stop_token token, std::string call, std::string who) {
        auto self = this->shared_from_this();
        if (!values_.empty()) {
            T value = std::move(values_.front());
            values_.pop_front();
            co_return std::optional<T>(std::move(value));
        }
        if (closed_)
            co_return std::nullopt;
        if (token.stop_requested())
            throw operation_cancelled(call.c_str(), who);
        auto w = std::make_shared<waiter>();
        std::optional<std::stop_callback<std::function<void()>>> on_stop;
        if (token.stop_possible())
            on_stop.emplace(token, [self, w] { self->event_listener_->post([self, w] { self->cancel(w); }); });
        co_await wait_for(w);
        on_stop.reset();
        if (w->cancelled)
            throw operation_cancelled(call.c_str(), who);
        co_return std::move(w->value);
    }

private:
    explicit waiter_queue(std::shared_ptr<event_listener> el) : event_listener_(std::move(el)) {}

    void cancel(const std::shared_ptr<waiter>& w) noexcept {
        if (w->done)
            return;
        std::erase(waiters_, w);
        w->done = true;
        w->cancelled = true;
        w->handle.resume();
    }

    std::shared_ptr<event_listener> event_listener_;
    std::deque<T> values_;
    std::deque<std::shared_ptr<waiter>> waiters_;
    bool closed_ = false;
};

}  // namespace cordma::detail
