#pragma once
/// \file
/// cordma::stream: a socket-like byte stream over RDMA.
///
///     stream_listener l = stream::serve(b, "10.0.0.1:7600");
///     stream s = co_await l.accept();
///     std::size_t n = co_await s.read(buffer);        // 0 at end of stream
///
///     stream c = co_await stream::connect(b, "10.0.0.1:7600");
///     co_await c.write(bytes);                         // all of it, or an error
///     co_await c.close();                              // the peer reads what was written, then 0
///
/// Byte-stream semantics like TCP: ordered, no message boundaries, any
/// sizes on either side. Underneath each write is one or more frames on a
/// link (lib/link). Writes below `register_size` are cut into frames of up
/// to `inline_size` bytes, copied into receives the reader keeps posted,
/// with credits: a window of them is taken without the reader (like a
/// socket buffer), then the writer waits for room, and a slow reader causes
/// neither receiver-not-ready errors nor growing memory on either side.
/// While the window is full, small writes are gathered into one batch (up
/// to inline_size bytes) and return at once; the batch goes as one frame
/// when credit returns.
/// From `register_size` up (and from a local_slice larger than inline_size)
/// a write is announced by address and the reader RDMA-READs it straight
/// into its own buffer (in pieces, as its reads ask), zero-copy; that write
/// returns once all of it has been read.
///
/// Threads: coroutines resume on the event listener thread. One read and one
/// write may run at once (full duplex); a second read while one runs (or a
/// second write) throws std::logic_error.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/export.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>

namespace cordma {

namespace detail {
class stream_state;
struct stream_accepts;
}

/// A stream's settings, given to stream::connect and stream::serve (each
/// side uses its own; the writer learns the reader's inline_size in the
/// hello). Values out of range throw std::invalid_argument naming the field.
struct CORDMA_API stream_options {
    /// Writes up to this size are copied into the peer's posted receives
    /// (one SEND each); larger ones are read by the peer from the writer's
    /// memory (zero-copy). 64 B to 1 MiB. Each side's receives hold its own
    /// inline_size; a writer uses the reader's.
    std::size_t inline_size = 16 * 1024;
    /// Inline frames in flight to a reader before its writer waits for credit
    /// (2 to 60).
    std::uint32_t window = 16;
    /// From this size a write registers the caller's memory for the peer to
    /// read (zero-copy; registration costs about a page fault per page, and
    /// the write waits for the reader); below it, the bytes are copied into
    /// the reader's posted receives, inline_size at a time.
    std::size_t register_size = 1 << 20;
    /// A peer that leaves pings unanswered this long, while a read or write
    /// waits on it, is taken for gone (its host powered off). At least 1 s.
    std::chrono::milliseconds peer_timeout{10'000};
};

class stream_listener;

/// What a stream has carried so far (like TCP_INFO): read from any thread.
/// Every stream's are also summed on the process's metrics pages
/// (metrics_endpoint.hpp: cordma_stream_*).
struct stream_statistics {
    /// Bytes handed to writes that returned.
    std::uint64_t bytes_written = 0;
    /// Bytes returned by reads.
    std::uint64_t bytes_read = 0;
    /// Data frames sent: inline frames (one per write, or one per batch of
    /// small writes gathered while the window was full) and announced
    /// zero-copy frames. bytes_written / frames_sent is the batching.
    std::uint64_t frames_sent = 0;
    /// Data frames taken in from the peer (its frames_sent, once read).
    std::uint64_t frames_received = 0;
    /// Writes that waited because the reader's window was full (no credit
    /// or no send slot free): the writer outran the reader.
    std::uint64_t credit_stalls = 0;
};

/// A reliable, ordered byte stream over one RDMA connection, used like a
/// TCP socket: read returns what has arrived, write returns once its buffer
/// may be reused (the contract is at the top of this header). A cheap
/// handle: copies share the stream. When the last copy goes without
/// close(), the stream closes in the background as close() does (the end
/// of stream sent after what was written, within stream_options'
/// peer_timeout), and its connection, queue pair and memory go.
class CORDMA_API stream {
public:
    /// An empty handle: every call throws std::logic_error.
    stream() = default;

    /// Connects to a stream listener at `address` ("host:port"), with the
    /// builder's settings (connect_timeout applies). Throws as
    /// builder::connect does, and std::system_error (protocol_error) if the
    /// listener is not a stream listener.
    static task<stream> connect(builder b, std::string address, stream_options options = {});
    /// Listens for streams on `address` ("addr:port"; port 0: any free one).
    static stream_listener serve(builder b, std::string_view address, stream_options options = {});

    /// False for an empty (default-constructed or moved-from) handle; says
    /// nothing about whether the stream is still open.
    explicit operator bool() const noexcept { return state_ != nullptr; }

    /// Reads what has arrived, at most buffer.size() bytes, waiting for at
    /// least one; returns how many (0 at end of stream, and again on every
    /// read after it; 0 for an empty buffer too). Throws std::system_error once the connection is gone with
    /// data unread (not_connected, naming the peer), operation_cancelled if
    /// `token` stops first (nothing is lost: the next read goes on where
    /// this one would have).
    task<std::size_t> read(std::span<std::byte> buffer, std::stop_token token = {});
    /// Reads exactly buffer.size() bytes; std::system_error (end of stream,
    /// naming how many bytes were missing) if the stream ends first.
    task<void> read_exactly(std::span<std::byte> buffer, std::stop_token token = {});
    /// Writes every byte (std::system_error otherwise, naming the peer).
    /// Returns once `buffer` may be reused. After shutdown_write or close,
    /// throws std::logic_error.
    task<void> write(std::span<const std::byte> buffer, std::stop_token token = {});
    /// The same from registered memory: large writes need no registration
    /// or copy.
    task<void> write(local_slice buffer, std::stop_token token = {});
    /// Half close: the peer's reads return 0 once they have everything
    /// written before it; this side may go on reading. Waits for credit to
    /// send the end of stream; operation_cancelled if `token` stops first
    /// (the end of stream is not sent: a later shutdown_write or close
    /// sends it).
    task<void> shutdown_write(std::stop_token token = {});
    /// shutdown_write (unless done), waits for what was written to leave,
    /// and closes the connection. Reads and writes fail from then on.
    task<void> close();

    /// The peer, as errors name it ("10.0.0.2:7600").
    const std::string& peer() const;
    /// Bytes and frames so far.
    stream_statistics statistics() const;
    /// Gives the writes from now on a trace id (trace.hpp; empty: none):
    /// their frames carry it to the reader (peer_trace()), a write that
    /// waits shows it in the stuck report, and each write opens a span
    /// (span_kind::stream_write) on the span hook. Between writes, from the
    /// thread that writes (not while a write runs).
    void set_trace(const trace_id& trace);
    /// What set_trace gave (empty: none).
    trace_id trace() const;
    /// The trace id of the frame the last read took its bytes from: the
    /// writer's set_trace when it wrote them (empty if none, or if its
    /// cordma does not send them).
    trace_id peer_trace() const;
    /// The underlying connection (its builder settings, its QP).
    const cordma::connection& connection() const;

private:
    friend class stream_listener;
    /// Wraps `state` in the handle whose last copy going closes the stream.
    explicit stream(std::shared_ptr<detail::stream_state> state);
    detail::stream_state& checked(const char* call) const;

    std::shared_ptr<detail::stream_state> state_;
};

/// Accepts streams (made by stream::serve, listening from then on). A
/// cheap handle: copies share the listening endpoint, which closes with
/// the last copy or close(). Accepted streams outlive it.
class CORDMA_API stream_listener {
public:
    /// An empty handle: accept() and address() throw std::logic_error,
    /// close() does nothing.
    stream_listener() = default;

    /// False for an empty handle; says nothing about whether it still
    /// listens.
    explicit operator bool() const noexcept { return accepts_ != nullptr; }

    /// The next stream a client opened. From the first accept() on, the
    /// listener takes clients as they come and each one's hello runs on
    /// its own: a client that is not a stream client, or whose hello does
    /// not come within the builder's connect_timeout, is refused (logged)
    /// and holds up no other; streams opened while no accept() waits are
    /// kept for the next. Throws operation_cancelled if `token` stops
    /// first, disconnected_error once closed.
    task<stream> accept(std::stop_token token = {});
    /// The address it listens on, "ip:port".
    const std::string& address() const;
    /// The event listener thread its accepts resume on (the builder's);
    /// std::logic_error on an empty handle.
    const std::shared_ptr<cordma::event_listener>& event_listener() const;
    /// Stops listening; streams not yet accepted are closed. (The last copy
    /// of a listener going closes it too.)
    void close();

private:
    friend class stream;
    stream_listener(builder b, listener l, stream_options options);

    std::shared_ptr<detail::stream_accepts> accepts_;
};

}  // namespace cordma
