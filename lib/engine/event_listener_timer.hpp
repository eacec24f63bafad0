#pragma once
/// A timer of event_listener::call_after: an io_uring timeout whose
/// completion runs the callback unless its handle was cancelled. Made in
/// event_listener_uring.cpp; the ones that never fired are deleted when the
/// listener stops (event_listener.cpp).

#include <liburing.h>

#include <functional>
#include <memory>

#include <cordma/event_listener.hpp>

namespace cordma {

struct event_listener::timer_entry : detail::uring_target {
    __kernel_timespec timeout{};
    std::function<void()> fn;
    std::shared_ptr<event_listener::timer> handle;
    event_listener* owner = nullptr;
};

}  // namespace cordma
