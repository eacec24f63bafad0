// cordma::stream and cordma::stream_listener: connecting, serving and
// accepting streams, and the handle's calls (stream_state does the work).
#include <cordma/stream.hpp>

#include <cstdio>
#include <optional>
#include <stdexcept>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "connect/qp_settings.hpp"
#include "engine/waiter_queue.hpp"
#include "link/link_hello.hpp"
#include "stream/stream_state.hpp"
#include "log/logf.hpp"

namespace cordma {

using detail::stream_state;

task<stream> stream::connect(builder b, std::string address, stream_options options) {
    detail::check_stream_options(options, "cordma::stream::connect");
    detail::wait_for_receivers(b);
    cordma::connection c;
    std::optional<connect_error> refused;
    try {
        c = co_await b.connect(address);
    } catch (const connect_error& e) {
        refused.emplace(e.code(), std::string("cordma::stream::connect: ") + e.what());  // in the stream's words
    }
    if (refused)
        throw *refused;
    std::exception_ptr error;
    std::shared_ptr<stream_state> state;
    try {
        state = co_await detail::open_stream(b, options, c, {}, false);
    } catch (const std::system_error& e) {
        // The hello's errors speak of links and modules; say whose.
        error = std::make_exception_ptr(
            std::system_error(e.code(), "cordma::stream::connect to " + address + ": the stream's hello: " + e.what()));
    } catch (...) {
        error = std::current_exception();
    }
    if (error) {
        co_await c.close();
        std::rethrow_exception(error);
    }
    co_return stream(std::move(state));
}

stream_listener stream::serve(builder b, std::string_view address, stream_options options) {
    detail::check_stream_options(options, "cordma::stream::serve");
    detail::wait_for_receivers(b);
    listener l = b.listen(address);
    return stream_listener(std::move(b), std::move(l), options);
}

stream::stream(std::shared_ptr<stream_state> state) {
    if (!state)
        return;
    // The handle shares the state under a count of its own: its deleter
    // runs when the last copy goes, and closes the stream as close() does.
    // The state's own references (its loops', its timers') are not counted.
    stream_state* raw = state.get();
    state_ = std::shared_ptr<stream_state>(raw, [state = std::move(state)](stream_state*) mutable noexcept {
        auto last = std::move(state);
        try {
            spawn_detached(last->close(), [](std::exception_ptr) {});
        } catch (...) {
            // Out of memory: the stream goes when its peer does.
        }
    });
}

stream_state& stream::checked(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("cordma::stream::") + call + " on an empty stream handle");
    return *state_;
}

task<std::size_t> stream::read(std::span<std::byte> buffer, std::stop_token token) {
    auto state = state_;
    checked("read");
    std::size_t n = co_await state->read(buffer, token);
    co_return n;
}

task<void> stream::read_exactly(std::span<std::byte> buffer, std::stop_token token) {
    auto state = state_;
    checked("read_exactly");
    std::size_t got = 0;
    while (got < buffer.size()) {
        std::size_t n = co_await state->read(buffer.subspan(got), token);
        if (n == 0)
            throw std::system_error(std::make_error_code(std::errc::no_message_available),
                                    "cordma::stream::read_exactly from " + state->peer() + ": the stream ended " +
                                        std::to_string(buffer.size() - got) + " bytes short of " +
                                        std::to_string(buffer.size()));
        got += n;
    }
}

task<void> stream::write(std::span<const std::byte> buffer, std::stop_token token) {
    auto state = state_;
    checked("write");
    co_await state->write(buffer, {}, token);
}

task<void> stream::write(local_slice buffer, std::stop_token token) {
    auto state = state_;
    checked("write");
    std::span<const std::byte> bytes(buffer.data(), buffer.size());
    co_await state->write(bytes, buffer, token);
}

task<void> stream::shutdown_write(std::stop_token token) {
    auto state = state_;
    checked("shutdown_write");
    co_await state->shutdown_write(std::move(token));
}

task<void> stream::close() {
    auto state = state_;
    if (!state)
        co_return;
    co_await state->close();
}

const std::string& stream::peer() const { return checked("peer").peer(); }

stream_statistics stream::statistics() const { return checked("statistics").statistics(); }

void stream::set_trace(const trace_id& trace) { checked("set_trace").set_trace(trace); }

trace_id stream::trace() const { return checked("trace").trace(); }

trace_id stream::peer_trace() const { return checked("peer_trace").peer_trace(); }

const cordma::connection& stream::connection() const { return checked("connection").connection(); }

namespace detail {

/// A stream_listener's state, shared by its copies: the listener, and the
/// streams whose hellos have come, waiting for an accept(). From the first
/// accept() on, one listener accept is always pending (take_clients) and
/// each client's hello runs on its own (open_accepted), so a client that
/// connects and never sends its hello holds up no other for its
/// connect_timeout. The last copy going closes the listener, which ends
/// take_clients.
struct stream_accepts {
    builder b;
    listener l;
    stream_options options;
    std::shared_ptr<cordma::event_listener> event_listener;
    std::shared_ptr<waiter_queue<std::shared_ptr<stream_state>>> ready;
    bool taking = false;

    ~stream_accepts() {
        try {
            l.close();
        } catch (...) {
        }
    }
};

namespace {

task<void> open_accepted(std::weak_ptr<stream_accepts> weak, builder b, stream_options options,
                         cordma::connection c) {
    std::string who = c.peer();
    std::shared_ptr<stream_state> state;
    std::string failure;
    try {
        state = co_await open_stream(b, options, c, {}, true);
    } catch (const std::exception& e) {
        failure = e.what();
    }
    if (state) {
        std::optional<std::shared_ptr<stream_state>> refused = state;
        if (auto a = weak.lock())
            refused = a->ready->push(state);
        if (refused)  // the listener closed meanwhile
            co_await state->close();
        co_return;
    }
    detail::logf(log_level::warning, "cordma::stream_listener::accept: refused %s: %s", who.c_str(), failure.c_str());
    co_await c.close();
}

task<void> take_clients(std::weak_ptr<stream_accepts> weak, listener l, builder b, stream_options options) {
    for (;;) {
        cordma::connection c;
        bool closed = false;
        try {
            c = co_await l.accept();
        } catch (const std::exception&) {
            closed = true;  // the listener was closed
        }
        if (closed) {
            if (auto a = weak.lock())
                for (auto& waiting : a->ready->close())
                    spawn_detached(waiting->close(), [](std::exception_ptr) {});
            co_return;
        }
        spawn_detached(open_accepted(weak, b, options, std::move(c)), [](std::exception_ptr) {});
    }
}

}  // namespace

}  // namespace detail

stream_listener::stream_listener(builder b, listener l, stream_options options)
    : accepts_(std::make_shared<detail::stream_accepts>()) {
    accepts_->event_listener = b.event_listener();
    accepts_->ready = detail::waiter_queue<std::shared_ptr<stream_state>>::make(accepts_->event_listener);
    accepts_->b = std::move(b);
    accepts_->l = std::move(l);
    accepts_->options = options;
}

task<stream> stream_listener::accept(std::stop_token token) {
    std::shared_ptr<detail::stream_accepts> a = accepts_;
    if (!a)
        throw std::logic_error("cordma::stream_listener::accept on an empty stream_listener");
    auto el = a->b.event_listener();
    if (!el->running_in_this_thread())
        co_await el->schedule();
    if (!a->taking) {
        a->taking = true;
        spawn_detached(detail::take_clients(a, a->l, a->b, a->options), [](std::exception_ptr) {});
    }
    std::optional<std::shared_ptr<stream_state>> s =
        co_await a->ready->pop(std::move(token), "cordma::stream_listener::accept", a->l.address());
    if (!s)
        throw disconnected_error("cordma::stream_listener::accept", a->l.address(), "the listener is closed");
    co_return stream(std::move(*s));
}

const std::string& stream_listener::address() const {
    if (!accepts_)
        throw std::logic_error("cordma::stream_listener::address on an empty stream_listener");
    return accepts_->l.address();
}

const std::shared_ptr<cordma::event_listener>& stream_listener::event_listener() const {
    if (!accepts_)
        throw std::logic_error("cordma::stream_listener::event_listener on an empty stream_listener");
    return accepts_->event_listener;
}

void stream_listener::close() {
    if (accepts_)
        accepts_->l.close();
}

}  // namespace cordma
