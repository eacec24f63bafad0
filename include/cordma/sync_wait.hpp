#pragma once
/// \file
/// cordma::sync_wait: wait for a coroutine from code that is not one.
///
///     int main() {
///         auto conn = ...;
///         std::size_t n = cordma::sync_wait(copy_once(conn, ...));
///     }

#include <utility>

#include <cordma/detail/awaitable_traits.hpp>
#include <cordma/detail/sync_wait.hpp>

namespace cordma {

/// Starts the awaitable on the calling thread, blocks the calling thread until
/// it completes, and returns its result or rethrows its exception.
///
/// - The awaitable may complete on any thread (for cordma operations, the
///   event_listener thread); the calling thread sleeps on a condition variable
///   until then, without spinning.
/// - Returns by value, except that an awaitable yielding T& returns T&.
/// - A task must be passed as an rvalue: sync_wait(f()) or
///   sync_wait(std::move(t)).
/// - Never call it on a thread the awaitable needs in order to complete (on
///   the event_listener thread, or from inside a coroutine that thread
///   resumed): it would wait for itself forever.
/// - Costs one driver coroutine frame.
template <detail::awaitable A>
detail::sync_wait_result_t<A> sync_wait(A&& awaitable) {
    detail::sync_wait_event done;
    auto driver = detail::make_sync_wait_task(std::forward<A>(awaitable));
    driver.start(done);
    done.wait();
    return driver.take();
}

}  // namespace cordma
