#pragma once
/// Runs a function on the event listener thread and returns once it has
/// run, rethrowing what it threw: for set-up a constructor must finish
/// before it returns (receives posted before a peer is told "ready").
/// Inline when called on that thread.

#include <exception>
#include <future>

#include <cordma/event_listener.hpp>

namespace cordma::detail {

template <class F>
void run_and_wait(event_listener& el, F&& fn) {
    if (el.running_in_this_thread()) {
        fn();
        return;
    }
    std::promise<void> ran;
    auto done = ran.get_future();
    el.post([&fn, &ran] {
        try {
            fn();
            ran.set_value();
        } catch (...) {
            ran.set_exception(std::current_exception());
        }
    });
    done.get();
}

}  // namespace cordma::detail
