// A caller that drives the event listener's loop: a C API call (or any
// thread that waits for work of its own on the listener) takes the loop
// over while it waits, instead of handing its work to the listener thread
// and sleeping until that thread wakes it.
//
// Why: a call handed over costs two thread switches and a futex wake-up per
// call (the caller's post, the listener's answer). In busy and yielding
// polling the listener thread spins anyway; if the caller spins in its
// place, running the loop's turns itself, the call starts and ends on the
// caller's thread, as a C++ coroutine's would on the listener's.
//
// The protocol (loop_state_):
// In busy, yielding and adaptive polling (drive() says why not in event
// polling). An adaptive listener thread may be asleep in io_uring when a
// caller asks: the caller wakes it (take_loop), and the thread looks at
// the request before it sleeps (run_loop), so one of them sees the other.
// - listener_runs: the listener thread runs the loop. A caller asks for it
//   (park_asked); the thread sees that at its next turn, lets go of the
//   loop (loop_free) and parks on a futex word.
// - loop_free: nobody runs it. A caller takes it (caller_runs) with one
//   compare-and-swap: in a ping-pong every call after the first finds the
//   loop free, and takes and gives it back without a system call.
// - The parked thread wakes every park period and takes the loop back
//   (listener_runs) only when no caller took it during a whole period, so
//   timers, rdma_cm events and the completions nobody waits for run at most
//   two periods late between calls. It takes it back at once when a caller
//   asks it to (something only it may do: submit to io_uring, where a
//   request's completion belongs to the thread that submitted it; sleep),
//   when work is posted while nobody drives, when a caller waits for work
//   the loop must run, or when the listener stops.
// loop_state_'s acquire and release pass every "event listener thread only"
// member from one thread to the next.
#include <cordma/event_listener.hpp>

#include <liburing.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

namespace cordma {

namespace {

/// How long the parked listener thread sleeps between looks at whether
/// callers still drive its loop: the lateness of a timer that fires
/// between two calls is at most twice this.
constexpr std::chrono::milliseconds park_period{2};

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds limit) noexcept {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(limit.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(limit.count() % 1'000'000'000);
    // EINTR, EAGAIN (the word moved) and ETIMEDOUT all mean: look again.
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

void event_listener::wake_parked() noexcept {
    park_word_.fetch_add(1);
    futex_wake(park_word_);
}

// The listener thread, asked for the loop: gives it up and parks until it
// must take it back.
void event_listener::park() noexcept {
    // Entries its last turn made (a watch re-armed as it fired: the
    // eventfd a caller wrote to wake it from an adaptive sleep) go to the
    // kernel now: a caller finding them would have to hand the loop
    // straight back, and would again at every call.
    if (io_uring_sq_ready(ring_.get()) > 0)
        io_uring_submit(ring_.get());
    driver_.store(std::thread::id{}, std::memory_order_relaxed);
    loop_state_.store(loop_free, std::memory_order_release);
    // Not taken back before the caller that asked has had a period to come.
    std::uint64_t drives_seen = drives_.load() - 1;
    bool first = true;
    for (;;) {
        std::uint32_t word = park_word_.load();
        if (loop_state_.load(std::memory_order_acquire) == caller_sleeps) {
            watch_for_sleeping_caller();
            continue;
        }
        if (loop_state_.load() == loop_free) {
            bool wanted = stopping_.load() ||
                          (!first && (listener_wanted_.load() || posted_flag_.load() || waiting_callers_.load() > 0 ||
                                      drives_.load() == drives_seen));
            int expected = loop_free;
            if (wanted && loop_state_.compare_exchange_strong(expected, listener_runs, std::memory_order_acquire)) {
                listener_wanted_.store(false, std::memory_order_relaxed);
                driver_.store(thread_id_, std::memory_order_relaxed);
                // Watches that fired while callers drove (rearm_watch):
                // submitted with the turn's other entries (run_loop).
                submit_owed_watches();
                return;
            }
        }
        first = false;
        drives_seen = drives_.load();
        futex_wait(park_word_, word, park_period);
    }
}

bool event_listener::take_loop() noexcept {
    bool asked = false;
    for (unsigned spins = 0;; ++spins) {
        int state = loop_state_.load(std::memory_order_acquire);
        if (state == loop_free) {
            if (loop_state_.compare_exchange_weak(state, caller_runs, std::memory_order_acquire)) {
                drives_.fetch_add(1, std::memory_order_relaxed);
                driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
                return true;
            }
            continue;
        }
        if (stopping_.load(std::memory_order_relaxed))
            return false;
        if (state == caller_runs || state == caller_sleeps || (state == park_asked && !asked))
            return false;  // another caller has it, or is about to
        if (state == listener_runs) {
            if (!loop_state_.compare_exchange_weak(state, park_asked))
                continue;
            asked = true;
            // Adaptive polling: the thread may be asleep in io_uring (or
            // about to be: it looks at loop_state_ after storing
            // may_sleep_, both sequentially consistent), and would see the
            // request only when something else woke it.
            if (may_sleep_.load())
                write_wakeup();
            continue;
        }
        // Asked; the listener thread lets go at its next turn. It may have
        // no CPU right now (two vCPUs, two processes): give it one.
        if (spins % 64 == 63)
            sched_yield();
    }
}

void event_listener::release_loop(bool want_listener) noexcept {
    // Entries a turn made for io_uring: only the listener thread submits.
    want_listener |= io_uring_sq_ready(ring_.get()) > 0 || stopping_.load(std::memory_order_relaxed);
    if (want_listener)
        listener_wanted_.store(true);
    driver_.store(std::thread::id{}, std::memory_order_relaxed);
    loop_state_.store(loop_free);
    // Sequentially consistent with post()'s store of posted_flag_ and load
    // of loop_state_: one side sees the other, so posted work never waits
    // for a park period.
    if (want_listener || listener_wanted_.load() || posted_flag_.load() || waiting_callers_.load() > 0)
        wake_parked();
}

// A caller driving in adaptive polling whose spin window ran out, holding
// the loop: arms the CQs, looks once more, and sleeps until the parked
// listener thread, which waits in io_uring on its behalf (it alone may:
// its watches and timers are its submissions), hands the loop back with
// something to do. The loop never leaves the caller's thread, so neither
// does its call (its frames end where they were made), and a slow answer
// costs two wake-ups (the listener's, the caller's), not a hand-off of
// the loop each way. False: go on driving is not possible (stopping).
bool event_listener::sleep_holding_loop(const std::atomic<bool>& done) noexcept {
    arm_all();
    // Completions that came before the arming took effect.
    if (poll_turn() || done.load(std::memory_order_acquire))
        return true;
    if (io_uring_sq_ready(ring_.get()) > 0 || stopping_.load(std::memory_order_relaxed))
        return false;
    std::uint32_t word = watch_word_.load();
    driver_.store(std::thread::id{}, std::memory_order_relaxed);
    loop_state_.store(caller_sleeps, std::memory_order_release);
    wake_parked();
    // Bounded waits, looked at again: the listener thread bumps the word
    // as it hands the loop back.
    while (loop_state_.load(std::memory_order_acquire) == caller_sleeps)
        futex_wait(watch_word_, word, std::chrono::milliseconds(100));
    driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    return !stopping_.load(std::memory_order_relaxed);
}

// The parked listener thread, a caller asleep with the loop: submits what
// the caller's turns left for it (the watches that fired, entries made),
// waits in io_uring until a completion is there (it reaps none: the
// caller does, awake), and hands the loop back.
void event_listener::watch_for_sleeping_caller() noexcept {
    submit_owed_watches();
    // post() writes the eventfd only while may_sleep_ says so; after the
    // store, look at what was posted before it (both sequentially
    // consistent, as in run_loop).
    may_sleep_.store(true);
    if (io_uring_cq_ready(ring_.get()) == 0 && !posted_flag_.load() && !stopping_.load()) {
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        io_uring_submit_and_wait(ring_.get(), 1);
    } else if (io_uring_sq_ready(ring_.get()) > 0) {
        io_uring_submit(ring_.get());
    }
    may_sleep_.store(false, std::memory_order_relaxed);
    loop_state_.store(caller_runs, std::memory_order_release);
    watch_word_.fetch_add(1);
    futex_wake(watch_word_);
}

event_listener::drive_result event_listener::drive(void (*start)(void*), void* arg, const std::atomic<bool>& done) {
    // Not in event polling, whose caller sleeps at once: a caller driving
    // the loop spins (the listener thread meanwhile parked), which event
    // polling promises not to do. In adaptive polling the caller spins as
    // the listener thread would, for its spin window after the last
    // activity, and then sleeps keeping the loop (sleep_holding_loop): a
    // ping-pong's answers come within the window, so it costs no wake-up;
    // a call left waiting (for a slow peer) costs two.
    bool polls = options_.mode != polling_mode::event;
    if (!polls || on_own_thread() || !take_loop()) {
        waiting_callers_.fetch_add(1);
        return drive_result::not_taken;
    }
    start_turn();  // what start posts is stamped now, not at the loop's last turn
    start(arg);
    // Adaptive polling: the spin window, measured from the first of a run
    // of idle turns; the clock is read once per 32 idle turns, never
    // while the loop finds work.
    bool adaptive = options_.mode == polling_mode::adaptive;
    unsigned idle_turns = 0;
    std::chrono::steady_clock::time_point idle_since{};
    for (;;) {
        if (done.load(std::memory_order_acquire)) {
            release_loop(false);
            return drive_result::done;
        }
        bool active = poll_turn();
        if (done.load(std::memory_order_acquire))
            continue;
        // Something only the listener thread may do: give the loop back,
        // and wait as a caller that posted would.
        if (io_uring_sq_ready(ring_.get()) > 0 || stopping_.load(std::memory_order_relaxed))
            break;
        if (options_.mode == polling_mode::yielding && !active)
            sched_yield();
        if (adaptive) {
            if (active) {
                idle_turns = 0;
                continue;
            }
            if (idle_turns++ % 32 != 0)
                continue;
            auto now = std::chrono::steady_clock::now();
            if (idle_turns == 1)
                idle_since = now;
            else if (now - idle_since >= options_.spin) {
                // The window is over: sleep, keeping the loop, until the
                // listener thread sees something come (or hand it back
                // if the thread cannot watch for this caller).
                if (!sleep_holding_loop(done))
                    break;
                idle_turns = 0;
            }
        }
    }
    waiting_callers_.fetch_add(1);
    release_loop(true);
    return drive_result::handed_back;
}

}  // namespace cordma
