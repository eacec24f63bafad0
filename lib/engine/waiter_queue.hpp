#pragma once
/// Values handed to waiters in order: a connect request to an accept(), a
/// region to a receive_remote_mr(), a peer's frame to a link's receive. One
/// primitive for every "values waiting for waiters" queue in cordma, with
/// cancellation (a std::stop_token, from any thread) and shutdown (close():
/// every waiter wakes with nothing). Event listener thread only; owned
/// through a shared_ptr (make()).
///
/// Nothing is allocated per value once the queue is warm: a waiter lives in
/// its pop's coroutine frame (from the frame cache), linked into the queue
/// while it waits; its stop callback is stored in that frame too; values
/// wait in a ring that keeps its capacity (a std::deque frees and allocates
/// a block every few values). The group's collectives and the link's frames
/// pop several values per message.

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

/// A FIFO of values in a ring that grows and never shrinks.
template <class T>
class value_ring {
public:
    value_ring() = default;
    value_ring(value_ring&& other) noexcept
        : slots_(std::move(other.slots_)), head_(std::exchange(other.head_, 0)),
          count_(std::exchange(other.count_, 0)) {}
    value_ring& operator=(value_ring&& other) noexcept {
        slots_ = std::move(other.slots_);
        head_ = std::exchange(other.head_, 0);
        count_ = std::exchange(other.count_, 0);
        return *this;
    }

    bool empty() const noexcept { return count_ == 0; }
    std::size_t size() const noexcept { return count_; }

    void push_back(T value) {
        if (count_ == slots_.size())
            grow();
        slots_[(head_ + count_) % slots_.size()].emplace(std::move(value));
        ++count_;
    }

    T pop_front() {
        std::optional<T>& slot = slots_[head_];
        T value = std::move(*slot);
        slot.reset();
        head_ = (head_ + 1) % slots_.size();
        --count_;
        return value;
    }

    /// Removes the values `pred` picks, keeping the others' order.
    template <class Pred>
    void erase_if(Pred pred) {
        std::size_t n = count_;
        for (std::size_t i = 0; i < n; ++i) {
            T value = pop_front();
            if (!pred(static_cast<const T&>(value)))
                push_back(std::move(value));
        }
    }

    /// Every value, in order (the ring is left empty).
    std::deque<T> take_all() {
        std::deque<T> out;
        while (!empty())
            out.push_back(pop_front());
        return out;
    }

private:
    void grow() {
        std::vector<std::optional<T>> bigger(slots_.empty() ? 8 : slots_.size() * 2);
        for (std::size_t i = 0; i < count_; ++i)
            bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
        slots_ = std::move(bigger);
        head_ = 0;
    }

    std::vector<std::optional<T>> slots_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
};

template <class T>
class waiter_queue : public std::enable_shared_from_this<waiter_queue<T>> {
    /// One pop waiting: in its coroutine frame, linked while it waits.
    struct waiter {
        std::coroutine_handle<> handle;
        std::optional<T> value;
        std::uint64_t id = 0;
        waiter* next = nullptr;
        bool done = false;
        bool cancelled = false;
    };
    struct awaiter {
        waiter* w;
        waiter_queue* queue;
        bool await_ready() const noexcept { return w->done; }
        void await_suspend(std::coroutine_handle<> h) noexcept {
            w->handle = h;
            queue->link(w);
        }
        void await_resume() const noexcept {}
    };
    // A function, not `co_await awaiter{...}`: g++ 12 destroys a braced
    // temporary awaiter twice in some coroutines.
    awaiter wait_for(waiter* w) { return {w, this}; }

    /// A stop callback that fits in the pop's frame (a std::function of
    /// two shared pointers would be allocated). It runs on the thread that
    /// stops the token and names the waiter by number: by the time the
    /// posted cancel runs, the waiter may have been answered and be gone.
    struct on_stop_fn {
        std::shared_ptr<waiter_queue> queue;
        std::uint64_t id;
        void operator()() noexcept {
            queue->event_listener_->post([queue = queue, id = id] { queue->cancel(id); });
        }
    };

public:
    static std::shared_ptr<waiter_queue> make(std::shared_ptr<event_listener> el) {
        return std::shared_ptr<waiter_queue>(new waiter_queue(std::move(el)));
    }

    /// Hands `value` to the longest-waiting waiter, or keeps it for the next.
    /// After close() the value is returned to the caller instead.
    std::optional<T> push(T value) {
        if (closed_)
            return std::optional<T>(std::move(value));
        if (waiter* w = unlink_first()) {
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
        while (waiter* w = unlink_first()) {
            w->done = true;
            w->handle.resume();
        }
        return values_.take_all();
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

    /// The next value if one waits (a pop now would not wait), without a
    /// coroutine frame; nothing otherwise.
    std::optional<T> try_pop() {
        if (values_.empty())
            return std::nullopt;
        return std::optional<T>(values_.pop_front());
    }

    /// Removes the values `pred` picks (e.g. a client that went away).
    template <class Pred>
    void erase_if(Pred pred) {
        values_.erase_if(pred);
    }

    /// The next value, or nothing once closed. Throws operation_cancelled
    /// naming `call` and `who` if `token` is stopped first. `call` and
    /// `who` are only read to throw: they must outlive the co_await (a
    /// temporary in the co_await's own expression does).
    task<std::optional<T>> pop(std::stop_token token, std::string_view call, std::string_view who) {
        auto self = this->shared_from_this();
        if (!values_.empty())
            co_return std::optional<T>(values_.pop_front());
        if (closed_)
            co_return std::nullopt;
        if (token.stop_requested())
            throw operation_cancelled(std::string(call).c_str(), std::string(who));
        waiter w;
        w.id = ++last_id_;
        std::optional<std::stop_callback<on_stop_fn>> on_stop;
        if (token.stop_possible())
            on_stop.emplace(token, on_stop_fn{self, w.id});
        co_await wait_for(&w);
        on_stop.reset();
        if (w.cancelled)
            throw operation_cancelled(std::string(call).c_str(), std::string(who));
        co_return std::move(w.value);
    }

private:
    explicit waiter_queue(std::shared_ptr<event_listener> el) : event_listener_(std::move(el)) {}

    void link(waiter* w) noexcept {
        w->next = nullptr;
        if (last_ != nullptr)
            last_->next = w;
        else
            first_ = w;
        last_ = w;
    }

    waiter* unlink_first() noexcept {
        waiter* w = first_;
        if (w != nullptr) {
            first_ = w->next;
            if (first_ == nullptr)
                last_ = nullptr;
        }
        return w;
    }

    /// Wakes the waiter numbered `id` as cancelled, if it still waits.
    void cancel(std::uint64_t id) noexcept {
        waiter* before = nullptr;
        for (waiter* w = first_; w != nullptr; before = w, w = w->next) {
            if (w->id != id)
                continue;
            (before != nullptr ? before->next : first_) = w->next;
            if (last_ == w)
                last_ = before;
            w->done = true;
            w->cancelled = true;
            w->handle.resume();
            return;
        }
    }

    std::shared_ptr<event_listener> event_listener_;
    value_ring<T> values_;
    waiter* first_ = nullptr;  // the longest waiting
    waiter* last_ = nullptr;
    std::uint64_t last_id_ = 0;
    bool closed_ = false;
};

}  // namespace cordma::detail
