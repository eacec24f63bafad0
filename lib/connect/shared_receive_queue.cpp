// shared_receive_queue: the public handle, made from a builder. The SRQ, its receives and the
// connections attached to it are its state's (shared_receive_state.cpp);
// next() is receive_queue's awaitable over the shared base.
#include <cordma/shared_receive_queue.hpp>

#include <cstdio>
#include <stdexcept>

#include <cordma/builder.hpp>
#include <cordma/device.hpp>
#include "connect/runtime.hpp"
#include "engine/run_and_wait.hpp"
#include "engine/shared_receive_state.hpp"
#include "log/logf.hpp"

namespace cordma {

namespace {
constexpr std::chrono::nanoseconds no_timeout{-1};
}

shared_receive_queue::shared_receive_queue(builder& b, std::size_t count, std::size_t buffer_size) {
    auto rt = b.runtime();
    auto state = std::make_shared<detail::shared_receive_state>(rt->event_listener, rt->pd, count, buffer_size);
    // Every receive may complete through any attached QP, whose receive CQ
    // is this one: room for all of them, given back when the SRQ goes.
    auto open = [&rt, &state, count] {
        state->receive_cq = rt->reserve_receives(static_cast<std::uint32_t>(count));
        state->on_destroyed = [weak = std::weak_ptr<detail::runtime>(rt), cq = state->receive_cq.get(), count] {
            if (auto alive = weak.lock())
                alive->release_receives(cq, static_cast<std::uint32_t>(count));
        };
        state->open();
    };
    detail::run_and_wait(*rt->event_listener, open);
    state_ = std::move(state);
}

bool shared_receive_queue::supported(builder& b) { return b.runtime()->pd->device()->attributes().max_srq > 0; }

shared_receive_queue& shared_receive_queue::operator=(shared_receive_queue&& other) noexcept {
    if (this != &other) {
        close();
        state_ = std::move(other.state_);
    }
    return *this;
}

shared_receive_queue::~shared_receive_queue() { close(); }

void shared_receive_queue::close() noexcept {
    if (!state_)
        return;
    auto state = std::move(state_);
    state->stop_accepting_connections();
    try {
        state->on_event_listener_thread([state] { state->close(); });
    } catch (const std::exception& e) {
        detail::logf(log_level::error, "cordma: shared_receive_queue: closing: %s", e.what());
    }
}

const std::shared_ptr<detail::shared_receive_state>& shared_receive_queue::checked(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("shared_receive_queue::") + call +
                               ": an empty shared_receive_queue (default-constructed or moved from)");
    return state_;
}

receive_queue::next_operation shared_receive_queue::next(std::stop_token token) {
    return receive_queue::next_operation(checked("next"), no_timeout, std::move(token));
}

receive_queue::next_operation shared_receive_queue::next(std::chrono::nanoseconds timeout, std::stop_token token) {
    return receive_queue::next_operation(checked("next"), std::max(timeout, std::chrono::nanoseconds::zero()),
                                         std::move(token));
}

task<ended_connection> shared_receive_queue::ended(std::stop_token token) {
    auto state = checked("ended");
    co_await state->event_listener()->schedule();
    auto ends = state->ends();
    std::string who = state->source();
    std::optional<ended_connection> end = co_await ends->pop(std::move(token), "shared_receive_queue::ended", who);
    if (!end)
        throw operation_cancelled("shared_receive_queue::ended", state->source(),
                                  "the shared_receive_queue was destroyed");
    co_return std::move(*end);
}

std::string shared_receive_queue::peer_of(std::uint32_t qp_num) const { return checked("peer_of")->peer_of(qp_num); }
std::size_t shared_receive_queue::connections() const { return checked("connections")->connections(); }
std::size_t shared_receive_queue::size() const { return checked("size")->size(); }
std::size_t shared_receive_queue::buffer_size() const { return checked("buffer_size")->buffer_size(); }
ibv_srq* shared_receive_queue::native_handle() const { return checked("native_handle")->srq(); }

}  // namespace cordma
