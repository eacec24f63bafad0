#pragma once
/// What can be co_awaited, and what co_await on it yields. Used to constrain
/// sync_wait and when_all, which accept any awaitable, not only tasks.

#include <concepts>
#include <coroutine>
#include <type_traits>
#include <utility>

namespace cordma::detail {

template <class T>
inline constexpr bool is_coroutine_handle_v = false;
template <class Promise>
inline constexpr bool is_coroutine_handle_v<std::coroutine_handle<Promise>> = true;

/// The three return types the language allows for await_suspend.
template <class T>
concept await_suspend_result = std::is_void_v<T> || std::same_as<T, bool> || is_coroutine_handle_v<T>;

/// An object with await_ready, await_suspend and await_resume that works in
/// any coroutine (its await_suspend accepts std::coroutine_handle<>).
template <class A>
concept awaiter = requires(A& a, std::coroutine_handle<> h) {
    { a.await_ready() } -> std::convertible_to<bool>;
    { a.await_suspend(h) } -> await_suspend_result;
    a.await_resume();
};

/// The awaiter co_await would use for an expression of type A&&: the result of
/// a member or free operator co_await if there is one, else the object itself.
/// (Our driver coroutines have no await_transform, so this is the whole rule.)
template <class A>
decltype(auto) get_awaiter(A&& a) {
    if constexpr (requires { static_cast<A&&>(a).operator co_await(); })
        return static_cast<A&&>(a).operator co_await();
    else if constexpr (requires { operator co_await(static_cast<A&&>(a)); })
        return operator co_await(static_cast<A&&>(a));
    else
        return static_cast<A&&>(a);
}

template <class A>
using awaiter_t = decltype(get_awaiter(std::declval<A>()));

/// A can be co_awaited. A is an lvalue reference type for lvalues: a task is
/// awaitable only as an rvalue (co_await std::move(t)), so
/// awaitable<task<int>&> is false.
template <class A>
concept awaitable = awaiter<std::remove_reference_t<awaiter_t<A>>>;

/// The type of `co_await std::declval<A>()`.
template <awaitable A>
using await_result_t = decltype(std::declval<std::remove_reference_t<awaiter_t<A>>&>().await_resume());

/// How a driver coroutine stores an await result: by value, except that an
/// lvalue reference stays a reference (an rvalue reference becomes a value,
/// moved out before the awaited object goes away).
template <class T>
using stored_result_t = std::conditional_t<std::is_rvalue_reference_v<T>, std::remove_cvref_t<T>, T>;

}  // namespace cordma::detail
