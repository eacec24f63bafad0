#pragma once
/// cordma inside Asio: run a cordma task as an Asio asynchronous operation,
/// so code living in an Asio executor (an io_context, a strand, an
/// asio::awaitable coroutine) gets its completion back on that executor.
///
///     asio::awaitable<void> session(cordma::connection conn, ...) {
///         co_await cordma::async_run(conn_write(conn, ...), asio::use_awaitable);
///         // resumed on this coroutine's executor, not the event listener thread
///     }
///
/// Needs Asio (standalone, <asio.hpp>); this header is the only one of
/// cordma's that includes it.

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

namespace cordma {

namespace detail {

template <class T, class Handler>
task<void> run_then_post(task<T> work, Handler handler) {
    auto executor = asio::get_associated_executor(handler);
    // Outstanding work, as for any Asio operation: io_context::run() must
    // not return while the RDMA side is still busy.
    auto outstanding = asio::make_work_guard(executor);
    std::exception_ptr error;
    if constexpr (std::is_void_v<T>) {
        try {
            co_await std::move(work);
        } catch (...) {
            error = std::current_exception();
        }
        asio::post(executor, [handler = std::move(handler), error]() mutable { std::move(handler)(error); });
    } else {
        std::optional<T> value;
        try {
            value.emplace(co_await std::move(work));
        } catch (...) {
            error = std::current_exception();
        }
        asio::post(executor, [handler = std::move(handler), error, value = std::move(value)]() mutable {
            std::move(handler)(error, value ? std::move(*value) : T{});
        });
    }
}

template <class T>
struct async_run_signature {
    using type = void(std::exception_ptr, T);
};
template <>
struct async_run_signature<void> {
    using type = void(std::exception_ptr);
};

}  // namespace detail

/// Starts `work` at once on the calling thread and completes `token` with
/// (std::exception_ptr, T) (or (std::exception_ptr) for task<void>) through
/// the token's associated executor: the handler never runs inside this call,
/// nor on the event listener thread unless that is its executor. With
/// asio::use_awaitable the exception is rethrown at the co_await.
/// T must be default-constructible (it is passed, empty, alongside an error).
/// Cancellation: pass a std::stop_token to the operations inside `work`.
template <class T, class CompletionToken>
auto async_run(task<T> work, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, typename detail::async_run_signature<T>::type>(
        [](auto handler, task<T> work) {
            spawn_detached(detail::run_then_post(std::move(work), std::move(handler)));
        },
        token, std::move(work));
}

}  // namespace cordma
