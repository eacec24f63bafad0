#pragma once
/// Where a coroutine's promise keeps what the coroutine body produced.
///
/// Every cordma promise type (task, when_all's children, sync_wait's driver)
/// inherits from coroutine_result<T>, which supplies return_value (or
/// return_void) and unhandled_exception, and lets the awaiter take the outcome
/// exactly once. The outcome lives inside the coroutine frame: storing it
/// allocates nothing.

#include <cassert>
#include <concepts>
#include <cstddef>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

namespace cordma::detail {

/// The outcome of a coroutine body returning T: not finished yet, the value
/// it co_returned, or the exception that escaped it.
template <class T>
class coroutine_result {
    static_assert(!std::is_rvalue_reference_v<T>,
                  "a coroutine cannot return an rvalue reference: return the value instead");

public:
    /// `co_return value;` The default template argument lets `co_return {a, b};`
    /// build a T from a braced list.
    template <class U = T>
        requires std::convertible_to<U&&, T>
    void return_value(U&& value) noexcept(std::is_nothrow_convertible_v<U&&, T>) {
        state_.template emplace<value_index>(std::forward<U>(value));
    }

    void unhandled_exception() noexcept {
        state_.template emplace<exception_index>(std::current_exception());
    }

    /// Moves the value out, or rethrows the body's exception. Call once, after
    /// the body finished.
    T take() {
        if (state_.index() == exception_index)
            std::rethrow_exception(*std::get_if<exception_index>(&state_));
        assert(state_.index() == value_index && "the coroutine has not finished");
        return std::move(*std::get_if<value_index>(&state_));
    }

private:
    // Indices, not types: T itself may be std::monostate or std::exception_ptr.
    static constexpr std::size_t value_index = 1;
    static constexpr std::size_t exception_index = 2;
    std::variant<std::monostate, T, std::exception_ptr> state_;
};

/// A coroutine returning a reference keeps the referred object's address.
template <class T>
class coroutine_result<T&> {
public:
    void return_value(T& value) noexcept { value_ = std::addressof(value); }

    void unhandled_exception() noexcept { exception_ = std::current_exception(); }

    T& take() {
        if (exception_)
            std::rethrow_exception(exception_);
        assert(value_ != nullptr && "the coroutine has not finished");
        return *value_;
    }

private:
    T* value_ = nullptr;
    std::exception_ptr exception_;
};

template <>
class coroutine_result<void> {
public:
    void return_void() noexcept {}

    void unhandled_exception() noexcept { exception_ = std::current_exception(); }

    void take() {
        if (exception_)
            std::rethrow_exception(exception_);
    }

private:
    std::exception_ptr exception_;
};

}  // namespace cordma::detail
