// connection, the handle: its copies count, and the last one going closes
// the connection as a socket's close() does (a bounded linger for the sends
// already posted, then a graceful disconnect), so that dropping a handle
// with receives posted leaves no queue pair, region or memory behind.
#include <cordma/connection.hpp>

#include <cordma/task_group.hpp>

#include "engine/connection_state.hpp"
#include "engine/transport.hpp"
#include "log/logf.hpp"

namespace cordma {

namespace detail {
namespace {

/// Event listener thread. Resumes when no send is pending on `state`, it
/// broke, or `until` has passed, looking every few milliseconds: at close only, so
/// nothing is added to the completion path.
struct sends_settled {
    std::shared_ptr<connection_state> state;
    std::chrono::steady_clock::time_point until;
    static constexpr std::chrono::milliseconds look_every{5};

    bool done() const noexcept {
        return state->broken() || !state->sends_pending() || std::chrono::steady_clock::now() >= until;
    }
    bool await_ready() const noexcept { return done(); }
    void await_suspend(std::coroutine_handle<> h) { look_later(h); }
    void await_resume() const noexcept {}

    void look_later(std::coroutine_handle<> h) {
        state->event_listener()->call_after(look_every, [this, h] {
            if (done())
                h.resume();
            else
                look_later(h);
        });
    }
};

task<void> close_dropped(std::shared_ptr<connection_state> state) {
    if (state->closing_dropped)
        co_return;
    state->closing_dropped = true;
    if (!state->broken()) {
        // A named awaiter, not a braced temporary in the co_await: GCC 12
        // destroys such a temporary twice (here: one reference too few on
        // the state, which then went while receives were still posted).
        sends_settled settled{state, std::chrono::steady_clock::now() + connection::dropped_linger};
        co_await settled;
        logf(log_level::debug, "cordma: connection to %s (QP %u): the last handle was dropped; closing it",
             state->peer().c_str(), state->qp()->qp_num());
        if (!state->broken() && state->transport())
            co_await state->transport()->close();
    }
    // Posted receives are flushed now; the state goes with the last of them.
    state->shut_down("connection closed: its last handle was dropped", disconnect_cause::closed_here);
}

}  // namespace
}  // namespace detail

connection::connection(std::shared_ptr<detail::connection_state> state) noexcept : state_(std::move(state)) {
    if (state_)
        state_->handles.fetch_add(1, std::memory_order_relaxed);
}

connection::connection(const connection& other) noexcept : state_(other.state_) {
    if (state_)
        state_->handles.fetch_add(1, std::memory_order_relaxed);
}

connection& connection::operator=(const connection& other) noexcept {
    if (this != &other) {
        connection copy(other);
        *this = std::move(copy);
    }
    return *this;
}

connection& connection::operator=(connection&& other) noexcept {
    if (this != &other) {
        release();
        state_ = std::move(other.state_);
    }
    return *this;
}

connection::~connection() { release(); }

void connection::release() noexcept {
    if (!state_)
        return;
    auto state = std::move(state_);
    if (state->handles.fetch_sub(1, std::memory_order_acq_rel) != 1)
        return;
    try {
        // Never inline: a handle can go inside an operation's resumption.
        auto el = state->event_listener();
        el->post([state = std::move(state)]() mutable {
            spawn_detached(detail::close_dropped(std::move(state)), [](std::exception_ptr) {});
        });
    } catch (...) {
        // Out of memory: the state goes as before, when its last work
        // request completes or its peer disconnects.
    }
}

}  // namespace cordma
