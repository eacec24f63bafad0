#pragma once
/// How a C entry point runs: c_entry turns a failure into errno and
/// cordma_last_error; run_call runs the call's task on the context's event
/// listener thread while the calling thread waits.
///
/// Nothing here allocates on a call that succeeds:
/// - the subject ("peer 1, 10.0.0.3:40512") and what the call waited for
///   are put into words only when the call fails;
/// - the call's task is made on the event listener thread, where its frame
///   also ends, so frames come from and go back to that thread's cache (a
///   frame made on the caller's thread and ended on the listener's would
///   leave one cache empty and the other full: an allocation per call);
/// - the hand-off is one posted function holding one pointer (within
///   std::function's own storage) to what the caller keeps on its stack.

#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <cordma/detail/frame_cache.hpp>
#include <cordma/detail/sync_wait.hpp>

#include "c_api/c_context.hpp"

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

/// What a call's caller and its run on the listener share: on the
/// caller's stack, for as long as the caller waits.
template <class T, class Make>
struct call_box {
    cordma_context* ctx;
    Make* make;
    int timeout_ms;
    bool last;
    std::optional<T> result{};
    std::exception_ptr error{};
    sync_wait_event done{};
};

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
    // The caller may return, and its box go, as soon as this is set:
    // nothing of the box is touched after it.
    box->done.set();
}

/// Runs the task `make()` returns on the event listener thread as the
/// context's call, under its deadline, and returns its result; rethrows
/// its failure (a timeout as c_failure ETIMEDOUT saying what it waited
/// for: `waiting_for`, as_text). `timeout_ms` -1 takes the context's (cordma_config.timeout_ms).
/// `last`: the context's last call (cordma_destroy), after which nothing
/// of the context may run on the listener (its watch stops for good).
template <class Make, class Waiting>
auto run_call(cordma_context& ctx, Make make, const Waiting& waiting_for, int timeout_ms = -1, bool last = false) {
    using T = typename std::invoke_result_t<Make&>::value_type;
    call_box<T, Make> box{&ctx, &make, timeout_ms >= 0 ? timeout_ms : ctx.config.timeout_ms, last};
    ctx.listener_thread->post([b = &box] { run_on_listener(b); });
    box.done.wait();
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
