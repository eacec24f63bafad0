#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): the one implementation behind
/// every async_* function, a cordma awaitable run as an Asio asynchronous
/// operation under the contract that header documents (completion token,
/// handler executor, outstanding work, error_code mapping, cancellation).

#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <utility>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/system_executor.hpp>

#include <cordma/connection.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

namespace cordma {

namespace detail {

/// What co_await on a cordma awaitable yields.
template <class Awaitable>
struct awaited;
template <class Result>
struct awaited<operation<Result>> {
    using type = Result;
};
template <class T>
struct awaited<task<T>> {
    using type = T;
};
template <class Make>
using made_result_t = typename awaited<std::invoke_result_t<Make&, std::stop_token>>::type;

/// The completion signature for an operation yielding T, reporting errors
/// as Error (std::error_code or std::exception_ptr).
template <class Error, class T>
struct asio_signature {
    using type = void(Error, T);
};
template <class Error>
struct asio_signature<Error, void> {
    using type = void(Error);
};

/// The error_code a cordma call's exception completes an Asio operation
/// with (the mapping <cordma/asio.hpp> documents).
inline std::error_code asio_error_code(const std::exception_ptr& error) noexcept {
    try {
        std::rethrow_exception(error);
    } catch (const std::system_error& e) {
        // Exactly operation_cancelled's code, not every code that compares
        // equal to the condition: Asio users test operation_aborted.
        if (e.code() == std::error_code(ECANCELED, std::generic_category()))
            return asio::error::operation_aborted;
        return e.code();
    } catch (const std::invalid_argument&) {
        return std::make_error_code(std::errc::invalid_argument);
    } catch (const std::out_of_range&) {
        return std::make_error_code(std::errc::invalid_argument);
    } catch (const std::logic_error&) {
        return std::make_error_code(std::errc::operation_not_permitted);
    } catch (const std::bad_alloc&) {
        return std::make_error_code(std::errc::not_enough_memory);
    } catch (...) {
        // cordma's calls throw nothing else; this keeps a foreign exception
        // from escaping into the event listener thread.
        return std::make_error_code(std::errc::state_not_recoverable);
    }
}

template <class Error>
Error asio_error(const std::exception_ptr& error) noexcept {
    if constexpr (std::is_same_v<Error, std::error_code>)
        return asio_error_code(error);
    else
        return error;
}

/// Installed in a handler's cancellation slot: turns the cancellation types
/// the operation honours into a stop request.
class stop_on_cancel {
public:
    stop_on_cancel(std::stop_source source, asio::cancellation_type_t honoured)
        : source_(std::move(source)), honoured_(honoured) {}
    void operator()(asio::cancellation_type_t type) {
        if ((type & honoured_) != asio::cancellation_type::none)
            source_.request_stop();
    }

private:
    std::stop_source source_;
    asio::cancellation_type_t honoured_;
};

/// Forwards a stop of the caller's own token (agent_call::stop) to the
/// operation's source, which the cancellation slot stops too.
struct stop_relay {
    std::stop_source source;
    void operator()() noexcept { source.request_stop(); }
};

/// The executor to count an operation's outstanding work on: a strand's
/// inner executor (recursively), else the executor itself. The work is
/// released last, and a strand copy destroyed after that would take its
/// service's lock while the io_context, whose run() may have returned the
/// moment the work was done, destroys that service.
template <class Executor>
auto work_executor(const Executor& ex) {
    if constexpr (requires { ex.get_inner_executor(); })
        return work_executor(ex.get_inner_executor());
    else
        return ex;
}

/// The handler, held so that the frame can destroy its own copy before it
/// releases the operation's work (a coroutine's parameters live until its
/// frame goes; a moved-from executor_binder still holds its executor).
template <class Handler>
struct handler_slot {
    std::optional<Handler> handler;
};

/// The one implementation behind every async_* function: makes the cordma
/// awaitable with the stop token, awaits it, and posts (error, value) to
/// the handler's executor. Never throws: every failure goes to the handler.
/// Runs on the event listener thread; everything of the handler's it
/// holds (its executor above all) is gone before the operation's work is
/// released, so a program may destroy its io_context as soon as run()
/// returns.
template <class Error, class Make, class Handler, class DefaultExecutor>
task<void> run_for_asio(Make make, handler_slot<Handler> slot, std::stop_source source, std::stop_token also,
                        DefaultExecutor default_executor) {
    using T = made_result_t<Make>;
    // Outstanding work, as for any Asio operation: io_context::run() must
    // not return while the RDMA side is still busy.
    auto outstanding = asio::make_work_guard(
        work_executor(asio::get_associated_executor(*slot.handler, default_executor)));
    std::stop_token token = also;
    std::optional<std::stop_callback<stop_relay>> relay;
    if (source.stop_possible()) {
        token = source.get_token();
        if (also.stop_possible())
            relay.emplace(also, stop_relay{source});
    }
    Error error{};
    if constexpr (std::is_void_v<T>) {
        try {
            co_await make(std::move(token));
        } catch (...) {
            error = asio_error<Error>(std::current_exception());
        }
        relay.reset();
        {
            Handler handler = std::move(*slot.handler);
            slot.handler.reset();
            auto executor = asio::get_associated_executor(handler, default_executor);
            asio::post(executor, [handler = std::move(handler), error]() mutable {
                // The slot's handler holds the stop source: gone before the
                // user's handler runs, as Asio's own operations do.
                asio::get_associated_cancellation_slot(handler).clear();
                std::move(handler)(error);
            });
        }  // the executor and the moved-from handler, gone with the work still held
    } else {
        // Value-initialized, and passed so alongside an error (every T a
        // cordma call yields is default-constructible).
        T value{};
        try {
            value = co_await make(std::move(token));
        } catch (...) {
            error = asio_error<Error>(std::current_exception());
        }
        relay.reset();
        {
            Handler handler = std::move(*slot.handler);
            slot.handler.reset();
            auto executor = asio::get_associated_executor(handler, default_executor);
            asio::post(executor, [handler = std::move(handler), error, value = std::move(value)]() mutable {
                asio::get_associated_cancellation_slot(handler).clear();
                std::move(handler)(error, std::move(value));
            });
        }
    }
    outstanding.reset();  // last: run() may return from here on
}

/// The generic initiation: `make` is a callable std::stop_token -> a cordma
/// awaitable (operation<R> or task<R>), called once, inside the initiation.
/// `also` is a stop token of the caller's (agent_call::stop) that stops the
/// operation too. `honoured` is which cancellation types stop it (none: not
/// cancellable, the slot is left alone). Handlers without an associated
/// executor run on `default_executor`.
template <class Error, class CompletionToken, class Make, class DefaultExecutor = asio::system_executor>
auto async_cordma(CompletionToken&& token, Make make, std::stop_token also = {},
                  asio::cancellation_type_t honoured = asio::cancellation_type::terminal |
                                                       asio::cancellation_type::partial,
                  DefaultExecutor default_executor = {}) {
    using signature = typename asio_signature<Error, made_result_t<Make>>::type;
    return asio::async_initiate<CompletionToken, signature>(
        [](auto handler, Make make, std::stop_token also, asio::cancellation_type_t honoured,
           DefaultExecutor default_executor) {
            std::stop_source source(std::nostopstate);
            auto slot = asio::get_associated_cancellation_slot(handler);
            if (slot.is_connected() && honoured != asio::cancellation_type::none) {
                source = std::stop_source();
                slot.template emplace<stop_on_cancel>(source, honoured);
            }
            using handler_type = decltype(handler);
            spawn_detached(run_for_asio<Error>(std::move(make), handler_slot<handler_type>{std::move(handler)},
                                               std::move(source), std::move(also), std::move(default_executor)));
        },
        token, std::move(make), std::move(also), honoured, std::move(default_executor));
}

}  // namespace detail

}  // namespace cordma
