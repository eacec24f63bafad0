#pragma once
/// How a C entry point runs: c_entry turns a failure into errno and
/// cordma_last_error; run_call runs the call's task on the context's event
/// listener: in busy and yielding polling on the calling thread, which
/// drives the listener's loop while it waits; in adaptive and event
/// polling on the listener's thread, while the calling thread waits for
/// it: spinning first in adaptive polling (for the listener's own spin
/// window), sleeping at once in event polling.
///
/// Nothing here allocates on a call that succeeds:
/// - the subject ("peer 1, 10.0.0.3:40512") and what the call waited for
///   are put into words only when the call fails;
/// - the call's task is made on the thread running the listener's loop,
///   where its frame also ends (almost always), so frames come from and go
///   back to one thread's cache (a frame made on one thread and ended on
///   another would leave one cache empty and the other full: an
///   allocation per call);
/// - a caller that drives the loop hands nothing over; one that posts
///   hands over one function holding one pointer (within std::function's
///   own storage) to what it keeps on its stack.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <sched.h>

#include <cordma/detail/frame_cache.hpp>
#include <cordma/detail/sync_wait.hpp>

#include "c_api/c_context.hpp"
#include "engine/event_listener_access.hpp"

namespace cordma::detail::c_api {

/// `what` as text: a string as it is, or what a function making one
/// returns, called only now (a call's subject and what it waited for are
/// put into words only when it fails).
template <class What>
std::string as_text(const What& what) {
    if constexpr (std::is_invocable_v<const What&>)
        return what();
    else
        return std::string(what);
}

/// Who a C call was about, as a function making the text: a peer of a
/// context, or nothing.
struct call_subject {
    const cordma_context* ctx = nullptr;
    int peer = 0;

    /// Peer `peer` of `ctx` (nothing if `ctx` is NULL).
    static call_subject of(const cordma_context* ctx, int peer) noexcept { return {ctx, peer}; }
    std::string operator()() const { return ctx != nullptr ? subject_of(*ctx, peer) : std::string(); }
};

/// Runs a C entry point: its body's result, or `on_error` with the failure
/// recorded, about `subject` (as_text). No exception leaves it.
template <class R, class Subject, class F>
R c_entry(const char* call, const Subject& subject, R on_error, F&& body) noexcept {
    try {
        return body();
    } catch (...) {
        std::exception_ptr error = std::current_exception();
        std::string who;
        try {
            who = as_text(subject);
        } catch (...) {  // no memory for the words: the failure is still recorded
        }
        record_failure(call, who, error);
        return on_error;
    }
}

/// The call's failure as the C caller sees it: a timeout names the limit
/// and what the call waited for (`waiting_for`).
[[noreturn]] void rethrow_call_failure(cordma_context& ctx, const std::string& waiting_for);

/// Where a call handed to another thread stands (call_box::phase).
namespace call_phase {
inline constexpr int running = 0;
inline constexpr int finished = 1;
/// The caller sleeps on `done`: whoever ends the call must set it.
inline constexpr int sleeping = 2;
}  // namespace call_phase

/// A call with no way to finish at once: its task always runs.
struct no_fast_path {};

/// What a call's caller and its run on the listener share: on the
/// caller's stack, for as long as the caller waits.
template <class T, class Make, class Fast>
struct call_box {
    cordma_context* ctx;
    Make* make;
    Fast* fast;
    int timeout_ms;
    bool last;
    std::optional<T> result{};
    std::exception_ptr error{};
    /// The calling thread: a call that ends there ends inside its drive(),
    /// which sees `finished`, so `done` is not set (no lock, no wake-up).
    std::thread::id caller = std::this_thread::get_id();
    /// Set as a call ends on the caller's own thread: what a caller
    /// driving the loop itself looks at between turns.
    std::atomic<bool> finished{false};
    /// A call that ends on another thread (the listener's, or another
    /// caller's driving the loop): where it stands, for a caller that
    /// spins on it and then sleeps on `done` (wait_for_end).
    std::atomic<int> phase{call_phase::running};
    sync_wait_event done{};
};

/// Ends a call whose result or error is in `box`. On the caller's own
/// thread (it is driving the loop) it sets `finished`, which drive() looks
/// at. On any other thread it marks the phase finished and wakes the
/// caller only if it went to sleep: a caller that sees `finished` while it
/// spins returns, and its box (on its stack) is gone, so nothing of the
/// box is touched after the exchange unless the caller sleeps on `done`.
template <class Box>
void end_call(Box* box) noexcept {
    if (box->caller == std::this_thread::get_id()) {
        box->finished.store(true, std::memory_order_release);
        return;
    }
    if (box->phase.exchange(call_phase::finished, std::memory_order_acq_rel) == call_phase::sleeping)
        box->done.set();
}

/// The caller, its call handed to the listener: waits for the call's end.
/// With `spin` above zero (adaptive polling) it first looks at the phase
/// for that long, giving its CPU away now and then (two threads per
/// context on two vCPUs: the listener may need the one it is on), and
/// sleeps only if the call is still running: in a ping-pong the answer
/// comes within the listener's spin window, and the caller takes it with
/// no futex wake-up and no thread switch. The clock is read once per 32
/// looks.
template <class Box>
void wait_for_end(Box& box, std::chrono::microseconds spin) noexcept {
    if (spin.count() > 0) {
        auto until = std::chrono::steady_clock::now() + spin;
        for (unsigned looks = 1;; ++looks) {
            if (box.phase.load(std::memory_order_acquire) == call_phase::finished)
                return;
            if (looks % 32 == 0) {
                if (std::chrono::steady_clock::now() >= until)
                    break;
                sched_yield();
            }
        }
    }
    int expected = call_phase::running;
    if (box.phase.compare_exchange_strong(expected, call_phase::sleeping, std::memory_order_acq_rel))
        box.done.wait();
}

/// The coroutine that runs a call on the listener: starts at once, frees
/// its own frame when it ends.
struct call_runner {
    struct promise_type : frame_cached {
        call_runner get_return_object() const noexcept { return {}; }
        std::suspend_never initial_suspend() const noexcept { return {}; }
        std::suspend_never final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() const noexcept { std::terminate(); }  // the body catches everything
    };
};

template <class Box>
call_runner run_on_listener(Box* box) {
    arm_call(*box->ctx, box->timeout_ms);
    try {
        box->result.emplace(co_await (*box->make)());
    } catch (...) {
        box->error = std::current_exception();
    }
    disarm_call(*box->ctx, box->last);
    end_call(box);
}

/// Starts a call on the listener: its fast path first, if it has one
/// (`fast()` returns the result when the call can finish at once: no
/// coroutine, no deadline armed, no clock read), else its task.
template <class Box>
void start_call(Box* box) {
    if constexpr (!std::is_same_v<decltype(box->fast), no_fast_path*>) {
        bool finished = false;
        try {
            if (auto now = (*box->fast)()) {
                box->result.emplace(std::move(*now));
                finished = true;
            }
        } catch (...) {
            box->error = std::current_exception();
            finished = true;
        }
        if (finished) {
            end_call(box);
            return;
        }
    }
    run_on_listener(box);
}

/// Runs the task `make()` returns on the event listener thread as the
/// context's call, under its deadline, and returns its result; rethrows
/// its failure (a timeout as c_failure ETIMEDOUT saying what it waited
/// for: `waiting_for`, as_text). `timeout_ms` -1 takes the context's (cordma_config.timeout_ms).
/// `last`: the context's last call (cordma_destroy), after which nothing
/// of the context may run on the listener (its watch stops for good).
/// `fast`, if given, runs first on the listener: a std::optional<T> with
/// the result when the call finishes at once (start_call).
template <class Make, class Waiting, class Fast = no_fast_path>
auto run_call(cordma_context& ctx, Make make, const Waiting& waiting_for, int timeout_ms = -1, bool last = false,
              Fast* fast = nullptr) {
    using T = typename std::invoke_result_t<Make&>::value_type;
    using box_type = call_box<T, Make, Fast>;
    box_type box{&ctx, &make, fast, timeout_ms >= 0 ? timeout_ms : ctx.config.timeout_ms, last};
    // Busy and yielding polling: this thread runs the listener's loop
    // while it waits (event_listener_drive.cpp), so the call starts and
    // ends here, with no thread switch. Otherwise, or when another thread
    // drives the loop, the call is posted to it and this thread sleeps.
    event_listener& el = *ctx.listener_thread;
    auto driven = event_listener_access::drive(
        el, [](void* b) { start_call(static_cast<box_type*>(b)); }, &box, box.finished);
    if (driven != event_listener_access::drive_result::done) {
        if (driven == event_listener_access::drive_result::not_taken)
            el.post([b = &box] { start_call(b); });
        bool spins = el.options().mode == polling_mode::adaptive;
        wait_for_end(box, spins ? el.options().spin : std::chrono::microseconds{0});
        event_listener_access::end_wait(el);
    }
    if (box.error) {
        try {
            std::rethrow_exception(box.error);
        } catch (...) {
            rethrow_call_failure(ctx, as_text(waiting_for));
        }
    }
    return std::move(*box.result);
}

}  // namespace cordma::detail::c_api
