#pragma once
/// `co_await after(listener, delay)`: resumes on the event listener thread once
/// `delay` has passed (an io_uring timeout). For back-off between retries,
/// never to order processes. Event listener thread only.

#include <chrono>
#include <coroutine>
#include <memory>

#include <cordma/event_listener.hpp>

namespace cordma::detail {

struct delay_awaiter {
    event_listener* el;
    std::chrono::nanoseconds delay;
    std::shared_ptr<event_listener::timer> timer;
    bool await_ready() const noexcept { return delay.count() <= 0; }
    void await_suspend(std::coroutine_handle<> h) { timer = el->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

inline delay_awaiter after(event_listener& el, std::chrono::nanoseconds delay) {
    return {&el, delay, nullptr};
}

}  // namespace cordma::detail
