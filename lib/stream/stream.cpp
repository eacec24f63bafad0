// cordma::stream and cordma::stream_listener: connecting, serving and
// accepting streams, and the handle's calls (stream_state does the work).
#include <cordma/stream.hpp>

#include <cstdio>
#include <stdexcept>

#include <cordma/error.hpp>

#include "stream/stream_state.hpp"

namespace cordma {

using detail::stream_state;

task<stream> stream::connect(builder b, std::string address, stream_options options) {
    detail::check_stream_options(options, "cordma::stream::connect");
    cordma::connection c = co_await b.connect(address);
    std::exception_ptr error;
    std::shared_ptr<stream_state> state;
    try {
        state = co_await detail::open_stream(b, options, c, {});
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
    listener l = b.listen(address);
    return stream_listener(std::move(b), std::move(l), options);
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

task<void> stream::shutdown_write() {
    auto state = state_;
    checked("shutdown_write");
    co_await state->shutdown_write();
}

task<void> stream::close() {
    auto state = state_;
    if (!state)
        co_return;
    co_await state->close();
}

const std::string& stream::peer() const { return checked("peer").peer(); }

stream_statistics stream::statistics() const { return checked("statistics").statistics(); }

const cordma::connection& stream::connection() const { return checked("connection").connection(); }

task<stream> stream_listener::accept(std::stop_token token) {
    for (;;) {
        cordma::connection c = co_await listener_.accept(token);
        std::string who = c.peer();
        std::shared_ptr<stream_state> state;
        std::exception_ptr error;
        bool cancelled = false;
        try {
            state = co_await detail::open_stream(builder_, options_, c, token);
        } catch (const operation_cancelled&) {
            cancelled = true;
            error = std::current_exception();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "cordma::stream_listener::accept: refused %s: %s\n", who.c_str(), e.what());
            error = std::current_exception();
        }
        if (!error)
            co_return stream(std::move(state));
        co_await c.close();
        if (cancelled)
            std::rethrow_exception(error);
    }
}

const std::string& stream_listener::address() const { return listener_.address(); }

void stream_listener::close() { listener_.close(); }

}  // namespace cordma
