#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): a cordma::stream as an Asio
/// AsyncReadStream and AsyncWriteStream (asio_stream).

#include <cstddef>
#include <span>
#include <stop_token>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>

#include <cordma/asio/async_cordma.hpp>
#include <cordma/stream.hpp>
#include <cordma/task.hpp>

namespace cordma {

// ---- Streams ----------------------------------------------------------------

/// A cordma::stream as an Asio AsyncReadStream and AsyncWriteStream, so
/// asio::async_read, asio::async_write and asio::async_read_until work on
/// it:
///
///     cordma::asio_stream s(std::move(stream), io.get_executor());
///     std::size_t n = co_await asio::async_read_until(s, asio::dynamic_buffer(line), '\n', asio::use_awaitable);
///
/// Handlers run on their associated executor (by default this object's),
/// never inside the initiating call. async_read_some fills the first
/// non-empty buffer of the sequence as far as what has arrived allows and
/// ends with asio::error::eof at the end of the stream; async_write_some
/// writes the first non-empty buffer whole. The buffers must stay valid
/// until the handler runs, as for any Asio stream. One read and one write
/// at a time. Errors are mapped as for the async_* functions (<cordma/asio.hpp>).
/// Cancellation through the handler's slot: a read honours terminal and
/// partial (nothing is lost: the next read goes on where it would have), a
/// write terminal only (part of the buffer may have been sent).
template <class Executor = asio::any_io_executor>
class asio_stream {
public:
    /// The executor handlers run on when they have none of their own.
    using executor_type = Executor;

    /// Takes over `s`; handlers without an associated executor run on
    /// `executor`.
    asio_stream(stream s, Executor executor) : stream_(std::move(s)), executor_(std::move(executor)) {}

    /// The executor handlers without one of their own run on.
    executor_type get_executor() const noexcept { return executor_; }
    /// The cordma stream underneath (to close it, or for its statistics).
    stream& next_layer() noexcept { return stream_; }

    /// Reads what has arrived into the first non-empty buffer of `buffers`.
    /// Completion: void(std::error_code, std::size_t bytes);
    /// asio::error::eof at the end of the stream.
    template <class MutableBufferSequence, class ReadToken>
    auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
        asio::mutable_buffer first = first_of<asio::mutable_buffer>(buffers);
        std::span<std::byte> into(static_cast<std::byte*>(first.data()), first.size());
        return detail::async_cordma<std::error_code>(
            std::forward<ReadToken>(token),
            [s = stream_, into](std::stop_token stop) mutable { return read_some(s, into, std::move(stop)); }, {},
            asio::cancellation_type::terminal | asio::cancellation_type::partial, executor_);
    }

    /// Writes the first non-empty buffer of `buffers`, whole.
    /// Completion: void(std::error_code, std::size_t bytes).
    template <class ConstBufferSequence, class WriteToken>
    auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
        asio::const_buffer first = first_of<asio::const_buffer>(buffers);
        std::span<const std::byte> from(static_cast<const std::byte*>(first.data()), first.size());
        return detail::async_cordma<std::error_code>(
            std::forward<WriteToken>(token),
            [s = stream_, from](std::stop_token stop) mutable { return written(s, from, std::move(stop)); }, {},
            asio::cancellation_type::terminal, executor_);
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

    /// A read of a non-empty buffer that returns 0 is the end of the stream.
    static task<std::size_t> read_some(stream s, std::span<std::byte> into, std::stop_token stop) {
        std::size_t n = co_await s.read(into, std::move(stop));
        if (n == 0 && !into.empty())
            throw std::system_error(asio::error::eof);
        co_return n;
    }

    static task<std::size_t> written(stream s, std::span<const std::byte> from, std::stop_token stop) {
        co_await s.write(from, std::move(stop));
        co_return from.size();
    }

    stream stream_;
    Executor executor_;
};

}  // namespace cordma
