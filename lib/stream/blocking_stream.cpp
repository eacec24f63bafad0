// cordma::blocking_stream and blocking_stream_listener: each call runs the
// stream's coroutine to completion with sync_wait, stopped through its
// std::stop_token when the call's time limit passes (the stream does the
// work; nothing here touches the link).
#include <cordma/blocking_stream.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <type_traits>

#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

namespace cordma {

namespace {

using std::chrono::milliseconds;

std::string in_words(milliseconds limit) { return std::to_string(limit.count()) + " ms"; }

/// A blocking call on the event listener thread would sleep on the very
/// thread that has to finish it: refuse it (as rpc::client::call_sync does).
void check_thread(const std::shared_ptr<event_listener>& thread, const char* call) {
    if (thread->running_in_this_thread())
        throw std::logic_error(std::string(call) +
                               " on the event listener thread would wait for itself: co_await the "
                               "coroutine API (async()) there");
}

/// Runs `op(token)` on the event listener thread and, for a positive
/// `limit`, stops its token once `limit` has passed (the timer lives on that
/// thread, as call_after requires); `*expired` then says the limit, not
/// something else, stopped it. Resumes on the event listener thread.
template <class T, class Op>
task<T> within(std::shared_ptr<event_listener> thread, milliseconds limit, bool* expired, Op op) {
    co_await thread->schedule();
    std::stop_source stop;
    std::shared_ptr<event_listener::timer> timer;
    if (limit > milliseconds::zero())
        timer = thread->call_after(limit, [stop, expired]() mutable {
            *expired = true;
            stop.request_stop();
        });
    std::exception_ptr error;
    if constexpr (std::is_void_v<T>) {
        try {
            co_await op(stop.get_token());
        } catch (...) {
            error = std::current_exception();
        }
        if (timer)
            timer->cancel();  // the stream's calls resume on this thread
        if (error)
            std::rethrow_exception(error);
    } else {
        T value{};
        try {
            value = co_await op(stop.get_token());
        } catch (...) {
            error = std::current_exception();
        }
        if (timer)
            timer->cancel();
        if (error)
            std::rethrow_exception(error);
        co_return value;
    }
}

/// Waits for `op` with a time limit: its result, its exception, or (when
/// the limit stopped it) timed_out_error naming `call`, `peer` and `why` plus
/// the limit. The expiry flag is written on the event listener thread and
/// read here after sync_wait, which orders the two.
template <class T, class Op>
T run(const std::shared_ptr<event_listener>& thread, milliseconds limit, const char* call, const std::string& peer,
      const std::string& why, Op op) {
    check_thread(thread, call);
    bool expired = false;
    try {
        return sync_wait(within<T>(thread, limit, &expired, std::move(op)));
    } catch (const std::system_error& e) {
        if (expired && e.code() == std::errc::operation_canceled)
            throw timed_out_error(call, peer, why + " within " + in_words(limit));
        throw;
    }
}

/// Reads until `buffer` is full, counting into `*got` as the bytes come
/// (so a caller that times out knows how many are in the buffer).
task<void> fill(stream s, std::span<std::byte> buffer, std::size_t* got, std::stop_token token) {
    while (*got < buffer.size()) {
        std::size_t n = co_await s.read(buffer.subspan(*got), token);
        if (n == 0)
            throw std::system_error(std::make_error_code(std::errc::no_message_available),
                                    "cordma::blocking_stream::read_exactly from " + s.peer() +
                                        ": the stream ended " + std::to_string(buffer.size() - *got) +
                                        " bytes short of " + std::to_string(buffer.size()));
        *got += n;
    }
}

/// The stream's event listener thread; std::logic_error on an empty handle.
std::shared_ptr<event_listener> thread_of(const stream& s, const char* call) {
    if (!s)
        throw std::logic_error(std::string(call) + " on an empty blocking_stream");
    return s.connection().event_listener();
}

std::span<std::byte> writable(char* buffer, std::size_t size) {
    return {reinterpret_cast<std::byte*>(buffer), size};
}

}  // namespace

blocking_stream blocking_stream::connect(builder b, std::string address, stream_options options,
                                         milliseconds timeout) {
    constexpr const char* call = "cordma::blocking_stream::connect";
    if (timeout < milliseconds::zero())
        throw std::invalid_argument(std::string(call) + ": timeout is " + in_words(timeout) + "; it must not be negative");
    check_thread(b.event_listener(), call);
    if (timeout > milliseconds::zero())
        b.connect_timeout(timeout);  // this copy of the builder only
    try {
        return blocking_stream(sync_wait(stream::connect(b, address, options)));
    } catch (const timed_out_error&) {
        throw;
    } catch (const std::system_error& e) {
        if (e.code() == std::errc::timed_out)
            throw timed_out_error(call, address,
                                  "no stream within " + in_words(b.settings().connect_timeout) + " (" + e.what() + ")");
        throw;
    }
}

blocking_stream_listener blocking_stream::serve(builder b, std::string_view address, stream_options options) {
    return blocking_stream_listener(stream::serve(std::move(b), address, options));
}

std::size_t blocking_stream::read(char* buffer, std::size_t size) {
    constexpr const char* call = "cordma::blocking_stream::read";
    auto thread = thread_of(stream_, call);
    return run<std::size_t>(thread, timeout_, call, stream_.peer(),
                            "nothing came (nothing is lost: what comes goes to the next read)",
                            [s = stream_, into = writable(buffer, size)](std::stop_token token) mutable {
                                return s.read(into, std::move(token));
                            });
}

std::size_t blocking_stream::read(std::span<char> buffer) { return read(buffer.data(), buffer.size()); }

std::size_t blocking_stream::read(std::string& out, std::size_t most) {
    std::size_t old = out.size();
    out.resize(old + most);
    std::size_t n = 0;
    try {
        n = read(out.data() + old, most);
    } catch (...) {
        out.resize(old);
        throw;
    }
    out.resize(old + n);
    return n;
}

void blocking_stream::read_exactly(char* buffer, std::size_t size) {
    constexpr const char* call = "cordma::blocking_stream::read_exactly";
    auto thread = thread_of(stream_, call);
    std::size_t got = 0;
    try {
        run<void>(thread, timeout_, call, stream_.peer(), "", [&, s = stream_](std::stop_token token) {
            return fill(s, writable(buffer, size), &got, std::move(token));
        });
    } catch (const timed_out_error&) {
        throw timed_out_error(call, stream_.peer(),
                              std::to_string(got) + " of " + std::to_string(size) + " bytes came within " +
                                  in_words(timeout_) + " (they are in the buffer; nothing is lost)");
    }
}

void blocking_stream::read_exactly(std::span<char> buffer) { read_exactly(buffer.data(), buffer.size()); }

void blocking_stream::read_exactly(std::string& out, std::size_t size) {
    std::size_t old = out.size();
    out.resize(old + size);
    constexpr const char* call = "cordma::blocking_stream::read_exactly";
    std::size_t got = 0;
    try {
        auto thread = thread_of(stream_, call);
        run<void>(thread, timeout_, call, stream_.peer(), "", [&, s = stream_](std::stop_token token) {
            return fill(s, writable(out.data() + old, size), &got, std::move(token));
        });
    } catch (const timed_out_error&) {
        out.resize(old + got);
        throw timed_out_error(call, stream_.peer(),
                              std::to_string(got) + " of " + std::to_string(size) + " bytes came within " +
                                  in_words(timeout_) + " (appended to the string; nothing is lost)");
    } catch (...) {
        out.resize(old + got);
        throw;
    }
}

void blocking_stream::write(const char* data, std::size_t size) {
    constexpr const char* call = "cordma::blocking_stream::write";
    auto thread = thread_of(stream_, call);
    run<void>(thread, timeout_, call, stream_.peer(),
              "not all of " + std::to_string(size) +
                  " bytes went (part of them may reach the peer: the stream's bytes are out of step, close it)",
              [s = stream_, bytes = std::span(reinterpret_cast<const std::byte*>(data), size)](
                  std::stop_token token) mutable { return s.write(bytes, std::move(token)); });
}

void blocking_stream::write(std::string_view text) { write(text.data(), text.size()); }

void blocking_stream::shutdown_write() {
    constexpr const char* call = "cordma::blocking_stream::shutdown_write";
    auto thread = thread_of(stream_, call);
    run<void>(thread, timeout_, call, stream_.peer(),
              "the end of stream found no room to go (not sent: a later shutdown_write or close sends it)",
              [s = stream_](std::stop_token token) mutable { return s.shutdown_write(std::move(token)); });
}

void blocking_stream::close() {
    if (!stream_)
        return;
    check_thread(stream_.connection().event_listener(), "cordma::blocking_stream::close");
    sync_wait(stream_.close());
}

void blocking_stream::set_timeout(milliseconds limit) {
    if (limit < milliseconds::zero())
        throw std::invalid_argument("cordma::blocking_stream::set_timeout: " + in_words(limit) +
                                    "; it must not be negative (zero: no limit)");
    timeout_ = limit;
}

blocking_stream blocking_stream_listener::accept(milliseconds timeout) {
    constexpr const char* call = "cordma::blocking_stream_listener::accept";
    if (!listener_)
        throw std::logic_error(std::string(call) + " on an empty blocking_stream_listener");
    if (timeout < milliseconds::zero())
        throw std::invalid_argument(std::string(call) + ": timeout is " + in_words(timeout) + "; it must not be negative");
    auto thread = listener_.event_listener();
    return blocking_stream(run<stream>(thread, timeout, call, listener_.address(),
                                       "no client came (one that comes later is kept for the next accept)",
                                       [l = listener_](std::stop_token token) mutable {
                                           return l.accept(std::move(token));
                                       }));
}

}  // namespace cordma
