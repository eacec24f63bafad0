#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): any cordma task run as an
/// Asio asynchronous operation (async_run).

#include <exception>
#include <stop_token>
#include <type_traits>
#include <utility>

#include <asio/cancellation_type.hpp>

#include <cordma/asio/async_cordma.hpp>
#include <cordma/task.hpp>

namespace cordma {

// ---- Any cordma task ----------------------------------------------------------

/// Runs a cordma task as an Asio operation. Starts `work` at once on the
/// calling thread and completes `token` with (std::exception_ptr, T) (or
/// (std::exception_ptr) for task<void>) through the token's associated
/// executor, as the contract in <cordma/asio.hpp> says. With
/// asio::use_awaitable the exception is rethrown at the co_await, whole.
/// T must be default-constructible (it is passed, empty, alongside an error).
/// Not cancellable through a slot (a task has no stop token to stop): to
/// cancel, pass the callable form below, or a std::stop_token of your own
/// to the operations inside `work`.
///
/// Why std::exception_ptr and not std::error_code, as asio::co_spawn does:
/// `work` is arbitrary code that may throw anything (a type of its own, an
/// exception whose message is the only useful part); an error_code would
/// drop it silently. For cordma's own operations, whose exceptions are all
/// std::system_error or argument errors, the async_* functions of <cordma/asio.hpp> give
/// the error_code signature Asio's idioms (redirect_error, as_tuple) expect.
template <class T, class CompletionToken>
auto async_run(task<T> work, CompletionToken&& token) {
    return detail::async_cordma<std::exception_ptr>(
        std::forward<CompletionToken>(token),
        [work = std::move(work)](std::stop_token) mutable { return std::move(work); }, {},
        asio::cancellation_type::none);
}

/// async_run for a callable std::stop_token -> task<T>, called once inside
/// the initiating call: cancellable through the handler's slot (terminal
/// and partial) by stopping the token it was given. What that does is up
/// to the task. Completion: void(std::exception_ptr, T), as above.
///
///     co_await async_run([&](std::stop_token stop) { return copy_all(conn, from, to, stop); },
///                        asio::use_awaitable);
template <class MakeTask, class CompletionToken>
    requires std::is_invocable_v<MakeTask&, std::stop_token>
auto async_run(MakeTask make, CompletionToken&& token) {
    return detail::async_cordma<std::exception_ptr>(std::forward<CompletionToken>(token), std::move(make));
}

}  // namespace cordma
