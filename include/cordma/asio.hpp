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
#include <span>
#include <system_error>
#include <type_traits>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

#include <cordma/stream.hpp>
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

/// A cordma::stream as an Asio AsyncReadStream and AsyncWriteStream, so
/// asio::async_read, asio::async_write and asio::async_read_until work on
/// it:
///
///     cordma::asio_stream s(std::move(stream), io.get_executor());
///     std::size_t n = co_await asio::async_read_until(s, asio::dynamic_buffer(line), '\n', asio::use_awaitable);
///
/// Handlers run on their associated executor (by default this object's).
/// async_read_some fills the first non-empty buffer of the sequence as far
/// as what has arrived allows and ends with asio::error::eof at the end of
/// the stream; async_write_some writes the first non-empty buffer whole.
/// One read and one write at a time, as with any Asio stream. Errors are
/// the std::system_error's code of the stream's failure.
template <class Executor = asio::any_io_executor>
class asio_stream {
public:
    using executor_type = Executor;

    asio_stream(stream s, Executor executor) : stream_(std::move(s)), executor_(std::move(executor)) {}

    executor_type get_executor() const noexcept { return executor_; }
    stream& next_layer() noexcept { return stream_; }

    template <class MutableBufferSequence, class ReadToken>
    auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
        asio::mutable_buffer first = first_of<asio::mutable_buffer>(buffers);
        return asio::async_initiate<ReadToken, void(std::error_code, std::size_t)>(
            [this](auto handler, asio::mutable_buffer b) {
                std::span<std::byte> into(static_cast<std::byte*>(b.data()), b.size());
                spawn_detached(complete(stream_.read(into), b.size() != 0, std::move(handler)));
            },
            token, first);
    }

    template <class ConstBufferSequence, class WriteToken>
    auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
        asio::const_buffer first = first_of<asio::const_buffer>(buffers);
        return asio::async_initiate<WriteToken, void(std::error_code, std::size_t)>(
            [this](auto handler, asio::const_buffer b) {
                std::span<const std::byte> from(static_cast<const std::byte*>(b.data()), b.size());
                spawn_detached(complete(written(stream_, from), false, std::move(handler)));
            },
            token, first);
    }

private:
    template <class Buffer, class Sequence>
    static Buffer first_of(const Sequence& buffers) {
        for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
            Buffer b(*it);
            if (b.size() != 0)
                return b;
        }
        return Buffer();
    }

    static task<std::size_t> written(stream s, std::span<const std::byte> from) {
        co_await s.write(from);
        co_return from.size();
    }

    /// Runs `work` and posts (error, bytes) to the handler's executor; a
    /// read of a non-empty buffer that returns 0 is the end of the stream.
    template <class Handler>
    task<void> complete(task<std::size_t> work, bool zero_is_eof, Handler handler) {
        auto executor = asio::get_associated_executor(handler, executor_);
        auto outstanding = asio::make_work_guard(executor);
        std::error_code error;
        std::size_t n = 0;
        try {
            n = co_await std::move(work);
            if (n == 0 && zero_is_eof)
                error = asio::error::eof;
        } catch (const std::system_error& e) {
            error = e.code();
        } catch (const std::exception&) {
            error = std::make_error_code(std::errc::io_error);
        }
        asio::post(executor, [handler = std::move(handler), error, n]() mutable { std::move(handler)(error, n); });
    }

    stream stream_;
    Executor executor_;
};

}  // namespace cordma
