#pragma once
/// How a C entry point runs: c_entry turns a failure into errno and
/// cordma_last_error; run_call runs the call's task on the context's event
/// listener: in busy, yielding and adaptive polling on the calling
/// thread, which drives the listener's loop while it waits (in adaptive
/// polling for the spin window, then it sleeps); in event polling on the
/// listener's thread, while the calling thread sleeps.
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
#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

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
    /// Set as the call ends, before `done`: what a caller driving the
    /// loop itself looks at between turns.
    std::atomic<bool> finished{false};
    sync_wait_event done{};
};

/// Ends a call whose result or error is in `box`: sets `finished`, and
/// wakes the caller if it may be waiting (it is not when the call ends on
/// its own thread: then it is driving the loop). Nothing of the box is
/// touched after `finished` is set unless the caller waits for `done`.
template <class Box>
void end_call(Box* box) noexcept {
    bool wake = box->caller != std::this_thread::get_id();
    box->finished.store(true, std::memory_order_release);
    if (wake)
        box->done.set();
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
    // Busy, yielding and adaptive polling: this thread runs the listener's loop
    // while it waits (event_listener_drive.cpp), so the call starts and
    // ends here, with no thread switch. Otherwise, or when another thread
    // drives the loop, the call is posted to it and this thread sleeps.
    event_listener& el = *ctx.listener_thread;
    auto driven = event_listener_access::drive(
        el, [](void* b) { start_call(static_cast<box_type*>(b)); }, &box, box.finished);
    if (driven != event_listener_access::drive_result::done) {
        if (driven == event_listener_access::drive_result::not_taken)
            el.post([b = &box] { start_call(b); });
        box.done.wait();
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
