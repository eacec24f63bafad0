#pragma once
/// \file
/// cordma::when_all: run several awaitables concurrently and wait for all.
///
///     auto [a, b] = co_await cordma::when_all(conn.read(x, buf_x), read_header(conn));
///     std::vector<std::size_t> sizes = co_await cordma::when_all(std::move(tasks));

#include <tuple>
#include <utility>
#include <vector>

#include <cordma/detail/awaitable_traits.hpp>
#include <cordma/detail/when_all.hpp>

namespace cordma {

/// Awaits every argument concurrently; yields a std::tuple of their results in
/// argument order.
///
/// - Nothing starts until the result is co_awaited. Then each child is started
///   in argument order on the awaiting thread and runs until it finishes or
///   suspends, then the next one starts. The awaiting coroutine resumes on the
///   thread that finished the last child (inline, no hop).
/// - A child yielding void contributes std::monostate; one yielding T&
///   contributes T&.
/// - Failure: every child still runs to completion; then the exception of the
///   first child in argument order that failed is rethrown, and the others'
///   exceptions and values are discarded.
/// - rvalue arguments (tasks: `when_all(f(), std::move(t))`) are moved into the
///   result; lvalue arguments are awaited in place and must outlive the
///   co_await.
/// - Costs one driver coroutine frame per child, allocated when awaited.
template <detail::awaitable... A>
[[nodiscard]] detail::when_all_awaitable<A...> when_all(A&&... awaitables) {
    return detail::when_all_awaitable<A...>{std::forward<A>(awaitables)...};
}

/// Awaits every element concurrently; yields a std::vector of their results in
/// the same order, or void when the elements yield void (results that are
/// references come back as std::reference_wrapper).
///
/// Starting, resumption, failure and cost are as for the variadic when_all.
/// An empty vector completes immediately.
template <detail::awaitable A>
[[nodiscard]] detail::when_all_vector_awaitable<A> when_all(std::vector<A> awaitables) {
    return detail::when_all_vector_awaitable<A>{std::move(awaitables)};
}

}  // namespace cordma
