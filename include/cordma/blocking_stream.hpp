#pragma once
/// \file
/// cordma::blocking_stream: cordma::stream for code that is not a
/// coroutine, called like a socket.
///
///     blocking_stream_listener l = blocking_stream::serve(b, "10.0.0.1:7600");
///     blocking_stream s = l.accept();
///     char buf[40];
///     std::size_t n = s.read(buf, sizeof buf);   // what has arrived: 1 to 40 bytes, 0 at end of stream
///     s.write("reply");                           // every byte, or an error
///     s.close();
///
///     blocking_stream c = blocking_stream::connect(b, "10.0.0.1:7600");
///     c.set_timeout(std::chrono::seconds(5));     // each read and write, from now on
///
/// A thin layer over the coroutine API (<cordma/stream.hpp>), which does the
/// work: each call starts the stream's coroutine and sleeps on a condition
/// variable until it finishes on the builder's event listener thread
/// (sync_wait). The semantics are the stream's: bytes in order, no message
/// boundaries, one read and one write at a time (from two threads at once
/// is fine: full duplex). A short read is the normal case, as with recv(2);
/// read_exactly is for when the caller knows the length.
///
/// Threads: any thread but the builder's event listener thread (a call
/// there would wait for itself: std::logic_error). Coroutine code uses
/// async() instead.
///
/// Timeouts: zero (the default) waits as long as it takes, like a socket
/// without SO_RCVTIMEO; a call that runs out of time throws
/// cordma::timed_out_error (a std::system_error, code() ==
/// std::errc::timed_out) naming the call, the peer and the limit.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <cordma/builder.hpp>
#include <cordma/export.hpp>
#include <cordma/stream.hpp>

namespace cordma {

class blocking_stream_listener;

/// A stream (cordma::stream) with blocking calls, for plain threads: a cheap
/// handle like the stream it wraps (copies share the stream, which closes
/// when the last copy of it goes). Errors are the stream's: std::system_error
/// naming the peer, std::logic_error for a call on an empty handle, after
/// close(), or on the event listener thread.
class CORDMA_API blocking_stream {
public:
    /// An empty handle: every call but close() throws std::logic_error.
    blocking_stream() = default;
    /// Blocking calls on `s` (which goes on working through async() too);
    /// timeout() starts at zero (none).
    explicit blocking_stream(stream s) : stream_(std::move(s)) {}

    /// Connects to a stream listener at `address` ("host:port") and returns
    /// once the stream is open. `timeout` (positive) replaces the builder's
    /// connect_timeout for this connect: the handshake (refused connects
    /// retried until it passes) and then the stream's hello each get that
    /// long; zero keeps the builder's. Throws as stream::connect does; a
    /// connect out of time throws timed_out_error naming the address and the
    /// limit. The new stream's timeout() is zero (none).
    static blocking_stream connect(builder b, std::string address, stream_options options = {},
                                   std::chrono::milliseconds timeout = {});
    /// Listens for streams on `address` ("addr:port"; port 0: any free one),
    /// from the return on: clients may connect at once. Throws as
    /// stream::serve does (a bad address, or one in use).
    static blocking_stream_listener serve(builder b, std::string_view address, stream_options options = {});

    /// False for an empty handle; says nothing about whether the stream is
    /// still open.
    explicit operator bool() const noexcept { return static_cast<bool>(stream_); }

    /// Reads what has arrived, at most `size` bytes into `buffer`, waiting
    /// for at least one; returns how many. A short read is normal (the peer
    /// wrote less, or the rest is still on its way): like recv(2), loop or
    /// use read_exactly when the length is known. Returns 0 at the end of
    /// the stream (the peer closed or shut down writing, and everything it
    /// wrote has been read) and on every read after it, and for size 0.
    /// `buffer` is written only during the call. Throws std::system_error
    /// (not_connected, connection_aborted, naming the peer) once the
    /// connection is gone with data unread, and timed_out_error if nothing
    /// came within timeout(): nothing is lost then (a byte arriving later
    /// goes to the next read), and the stream stays usable.
    std::size_t read(char* buffer, std::size_t size);
    /// read(buffer.data(), buffer.size()).
    std::size_t read(std::span<char> buffer);
    /// Appends to `out` what has arrived, at most `most` bytes (a read as
    /// above); returns how many were appended, 0 at the end of the stream.
    /// On an exception `out` is as it was.
    std::size_t read(std::string& out, std::size_t most);

    /// Reads exactly `size` bytes into `buffer`, in as many pieces as they
    /// come. Throws std::system_error (no_message_available, naming how many
    /// bytes were missing) if the stream ends first, and timed_out_error if
    /// the bytes do not all come within timeout() (one limit for the whole
    /// call); the bytes read before either are in `buffer`, the error says
    /// how many, and none is lost to later reads.
    void read_exactly(char* buffer, std::size_t size);
    /// read_exactly(buffer.data(), buffer.size()).
    void read_exactly(std::span<char> buffer);
    /// Appends exactly `size` bytes to `out`. On an exception the bytes
    /// that came before it are appended (as read_exactly above leaves them
    /// in its buffer), so a caller may go on after a timeout.
    void read_exactly(std::string& out, std::size_t size);

    /// Writes every byte of `data` and returns once `data` may be reused
    /// (small writes when they are copied, from stream_options::
    /// register_size up when the reader has read them). Throws
    /// std::system_error naming the peer if the stream fails, and
    /// std::logic_error after shutdown_write() or close().
    ///
    /// A write out of time (timed_out_error) has sent an unknown part of
    /// `data`: the frames that went before the limit, and bytes gathered
    /// into the batch of small writes, still reach the reader; the rest does
    /// not. The byte sequence is therefore broken for any protocol on it:
    /// close the stream. A write from register_size up that times out while
    /// the reader is reading it makes the reader's read fail, and the stream
    /// with it, on both sides.
    void write(const char* data, std::size_t size);
    /// write(text.data(), text.size()).
    void write(std::string_view text);

    /// Half close: the peer's reads return 0 once they have everything
    /// written before; this side may go on reading. Waits for credit to send
    /// the end of the stream (timeout() applies: timed_out_error).
    void shutdown_write();
    /// Sends the end of the stream (unless sent), waits for what was written
    /// to leave (up to stream_options::peer_timeout) and closes the
    /// connection; reads and writes throw from then on. Nothing on an empty
    /// handle or a closed stream. timeout() does not apply: close is bounded
    /// by peer_timeout.
    void close();

    /// The limit for each read, read_exactly, write and shutdown_write of
    /// this handle from now on; zero (the default) for none. Not shared
    /// with copies of the handle. Throws std::invalid_argument if negative.
    void set_timeout(std::chrono::milliseconds limit);
    /// The limit set by set_timeout (zero: none).
    std::chrono::milliseconds timeout() const noexcept { return timeout_; }

    /// The stream underneath, for coroutines (co_await s.async().read(...))
    /// and for what this face does not have (statistics(), connection(),
    /// writes from a local_slice).
    stream& async() noexcept { return stream_; }
    /// The stream underneath (const).
    const stream& async() const noexcept { return stream_; }
    /// The peer, as errors name it ("10.0.0.2:7600"); std::logic_error on
    /// an empty handle.
    const std::string& peer() const { return stream_.peer(); }

private:
    stream stream_;
    std::chrono::milliseconds timeout_{0};
};

/// Accepts streams with blocking calls: stream_listener for plain threads.
/// A cheap handle; copies share the listening endpoint, which closes with
/// the last copy or close(). Accepted streams outlive it.
class CORDMA_API blocking_stream_listener {
public:
    /// An empty handle: accept() and address() throw std::logic_error,
    /// close() does nothing.
    blocking_stream_listener() = default;
    /// Blocking calls on `l` (which goes on working through async() too).
    explicit blocking_stream_listener(stream_listener l) : listener_(std::move(l)) {}

    /// The next stream a client opened, waiting for one as long as
    /// `timeout` (zero: as long as it takes). Not on the event listener
    /// thread (std::logic_error). Throws timed_out_error naming the
    /// listener's address and the limit when no client came (a client that
    /// comes later is kept for the next accept), disconnected_error once
    /// the listener is closed.
    blocking_stream accept(std::chrono::milliseconds timeout = {});
    /// The address it listens on, "ip:port" (the port it got for port 0).
    const std::string& address() const { return listener_.address(); }
    /// Stops listening; streams not yet accepted are closed.
    void close() { listener_.close(); }

    /// The listener underneath, for coroutines (co_await l.async().accept()).
    stream_listener& async() noexcept { return listener_; }

private:
    stream_listener listener_;
};

}  // namespace cordma
