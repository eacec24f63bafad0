#pragma once
/// The machinery behind cordma::when_all: one small driver coroutine per
/// child, and a counter the last child to finish uses to resume the awaiter.

#include <cordma/export.hpp>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <cordma/detail/awaitable_traits.hpp>
#include <cordma/detail/coroutine_result.hpp>
#include <cordma/detail/frame_cache.hpp>

namespace cordma::detail {

/// Counts the unfinished children of one when_all, plus one held by the
/// awaiting coroutine until it has started them all. Whoever brings the count
/// to zero resumes the awaiter, so the children may finish on any threads, in
/// any order, before or after the awaiter suspends.
class CORDMA_API when_all_counter {
public:
    explicit when_all_counter(std::size_t children) noexcept : remaining_(children + 1) {}

    when_all_counter(const when_all_counter&) = delete;
    when_all_counter& operator=(const when_all_counter&) = delete;

    /// Called by the awaiter once every child has started. Returns false if
    /// they have all finished already, and the awaiter must not suspend.
    bool suspend_awaiter(std::coroutine_handle<> awaiting) noexcept {
        // Stored before the decrement that lets a child see zero, so the child
        // that resumes the awaiter reads this value (acquire through the
        // release sequence of the counter).
        awaiting_ = awaiting;
        return remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1;
    }

    /// Called by each child as it finishes, on whichever thread finished it.
    /// Returns the coroutine to transfer to: the awaiter if this was the last
    /// one, else nothing. Touches nothing after the decrement unless last:
    /// otherwise the awaiter may already be running and destroying us.
    std::coroutine_handle<> child_finished() noexcept {
        if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1)
            return awaiting_;
        return std::noop_coroutine();
    }

private:
    std::atomic<std::size_t> remaining_;
    std::coroutine_handle<> awaiting_;
};

/// The value a when_all child contributes: void becomes std::monostate so it
/// fits in a tuple, references stay references.
template <class R>
using when_all_value_t = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

/// A driver coroutine awaiting one child of a when_all and keeping its result.
/// Lazy: started by start(); when its body ends it tells the counter, and
/// stays suspended so the result can be taken. Its owner destroys it.
template <class R>
class when_all_child {
public:
    class promise_type : public coroutine_result<R>, public frame_cached {
        struct final_awaiter {
            bool await_ready() const noexcept { return false; }
            std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) const noexcept {
                return self.promise().counter_->child_finished();
            }
            void await_resume() const noexcept {}
        };

    public:
        when_all_child get_return_object() noexcept {
            return when_all_child{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        final_awaiter final_suspend() const noexcept { return {}; }

    private:
        friend when_all_child;
        when_all_counter* counter_ = nullptr;
    };

    when_all_child(when_all_child&& other) noexcept : frame_(std::exchange(other.frame_, {})) {}
    when_all_child& operator=(when_all_child&&) = delete;

    ~when_all_child() {
        if (frame_)
            frame_.destroy();
    }

    /// Runs the child on this thread until it finishes or suspends.
    void start(when_all_counter& counter) noexcept {
        frame_.promise().counter_ = &counter;
        frame_.resume();
    }

    /// The child's result, or rethrows its exception. Call once, after the
    /// counter resumed the awaiter.
    when_all_value_t<R> take() {
        if constexpr (std::is_void_v<R>) {
            frame_.promise().take();
            return {};
        } else {
            return frame_.promise().take();
        }
    }

private:
    explicit when_all_child(std::coroutine_handle<promise_type> frame) noexcept : frame_(frame) {}

    std::coroutine_handle<promise_type> frame_;
};

/// A is what the caller passed: T for an rvalue (moved into the driver's
/// frame), T& for an lvalue (awaited in place; it outlives the co_await).
template <class A>
    requires std::is_void_v<await_result_t<A>>
when_all_child<void> make_when_all_child(A awaitable) {
    co_await static_cast<A&&>(awaitable);
}

template <class A>
    requires(!std::is_void_v<await_result_t<A>>)
when_all_child<stored_result_t<await_result_t<A>>> make_when_all_child(A awaitable) {
    co_return co_await static_cast<A&&>(awaitable);
}

template <class A>
using when_all_child_t = decltype(make_when_all_child<A>(std::declval<A>()));

template <class A>
using when_all_child_value_t = when_all_value_t<stored_result_t<await_result_t<A>>>;

/// The awaiter of co_await when_all(a, b, ...). Not movable: the children
/// point at its counter.
template <class... A>
class when_all_awaiter {
public:
    explicit when_all_awaiter(std::tuple<A...>&& awaitables)
        : when_all_awaiter(std::move(awaitables), std::index_sequence_for<A...>{}) {}

    when_all_awaiter(const when_all_awaiter&) = delete;
    when_all_awaiter& operator=(const when_all_awaiter&) = delete;

    bool await_ready() const noexcept { return sizeof...(A) == 0; }

    bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
        // Each child runs until it suspends, then the next one starts. The
        // counter's extra count keeps any child from resuming us meanwhile.
        std::apply([this](auto&... child) { (child.start(counter_), ...); }, children_);
        return counter_.suspend_awaiter(awaiting);
    }

    std::tuple<when_all_child_value_t<A>...> await_resume() {
        // A braced list evaluates left to right, so the first child (in
        // argument order) that failed is the one whose exception propagates.
        return std::apply(
            [](auto&... child) { return std::tuple<when_all_child_value_t<A>...>{child.take()...}; },
            children_);
    }

private:
    template <std::size_t... I>
    when_all_awaiter(std::tuple<A...>&& awaitables, std::index_sequence<I...>)
        : children_(make_when_all_child<A>(std::forward<A>(std::get<I>(awaitables)))...),
          counter_(sizeof...(A)) {}

    std::tuple<when_all_child_t<A>...> children_;
    when_all_counter counter_;
};

/// What when_all(a, b, ...) returns: holds the arguments (by value for
/// rvalues, by reference for lvalues) until it is awaited.
template <class... A>
class [[nodiscard]] when_all_awaitable {
public:
    explicit when_all_awaitable(A&&... awaitables) : awaitables_(std::forward<A>(awaitables)...) {}

    when_all_awaiter<A...> operator co_await() && { return when_all_awaiter<A...>{std::move(awaitables_)}; }

    /// Awaiting consumes the children: write co_await std::move(w), or await
    /// the when_all(...) expression directly.
    void operator co_await() const& = delete;

private:
    std::tuple<A...> awaitables_;
};

/// The awaiter of co_await when_all(std::vector<A>).
template <class A>
class when_all_vector_awaiter {
    using value_type = stored_result_t<await_result_t<A>>;

public:
    explicit when_all_vector_awaiter(std::vector<A>&& awaitables) : counter_(awaitables.size()) {
        children_.reserve(awaitables.size());
        for (A& awaitable : awaitables)
            children_.push_back(make_when_all_child<A>(std::move(awaitable)));
    }

    when_all_vector_awaiter(const when_all_vector_awaiter&) = delete;
    when_all_vector_awaiter& operator=(const when_all_vector_awaiter&) = delete;

    bool await_ready() const noexcept { return children_.empty(); }

    bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
        for (auto& child : children_)
            child.start(counter_);
        return counter_.suspend_awaiter(awaiting);
    }

    auto await_resume() {
        if constexpr (std::is_void_v<value_type>) {
            for (auto& child : children_)
                child.take();
        } else {
            using element = std::conditional_t<std::is_reference_v<value_type>,
                                               std::reference_wrapper<std::remove_reference_t<value_type>>,
                                               value_type>;
            std::vector<element> values;
            values.reserve(children_.size());
            for (auto& child : children_)
                values.push_back(child.take());
            return values;
        }
    }

private:
    std::vector<when_all_child_t<A>> children_;
    when_all_counter counter_;
};

/// What when_all(std::vector<A>) returns.
template <class A>
class [[nodiscard]] when_all_vector_awaitable {
public:
    explicit when_all_vector_awaitable(std::vector<A>&& awaitables) noexcept
        : awaitables_(std::move(awaitables)) {}

    when_all_vector_awaiter<A> operator co_await() && {
        return when_all_vector_awaiter<A>{std::move(awaitables_)};
    }

    void operator co_await() const& = delete;

private:
    std::vector<A> awaitables_;
};

}  // namespace cordma::detail
