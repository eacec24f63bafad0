#pragma once
/// \file
/// The event listener: one thread that owns a device's completion queues
/// (and those it makes on other devices: create_cq(device, entries)),
/// waits for their completion channels (and the rdma_cm channel, its
/// eventfd and its timers) through io_uring, and resumes the coroutines
/// whose operations completed, inline, on its own thread.

#include <cordma/export.hpp>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include <cordma/completion_queue.hpp>
#include <cordma/device.hpp>
#include <cordma/metrics.hpp>
#include <cordma/stuck_report.hpp>
#include <cordma/detail/completion_target.hpp>

struct io_uring;
struct rdma_event_channel;

namespace cordma {

namespace detail {
class event_listener_access;
class connection_registry;
}

/// How the event listener waits for completions.
enum class polling_mode {
    /// Arm the CQs and sleep in io_uring until the completion channel fires.
    /// Lowest CPU; each wake-up costs a few microseconds.
    event,
    /// Poll the CQs in a loop, never sleeping. Lowest latency; one core busy.
    busy,
    /// Poll for `spin` after the last completion, then arm and sleep.
    adaptive,
    /// Poll in a loop like busy, but give the CPU away (sched_yield) after
    /// every pass that found nothing: for more polling threads than cores
    /// (several ranks on one host), where pure spinning makes each wait
    /// for a scheduler time slice. Open MPI does the same when
    /// oversubscribed (mpi_yield_when_idle).
    yielding,
};

/// "event", "busy", "adaptive" or "yielding": for messages and reports.
/// The string is static.
CORDMA_API const char* to_string(polling_mode mode) noexcept;

/// How an event listener runs, fixed when it starts (event_listener::start,
/// builder::polling).
struct CORDMA_API event_listener_options {
    /// How the thread waits for completions (default: sleep until signalled).
    polling_mode mode = polling_mode::event;
    /// Adaptive mode: how long to keep polling after the last completion.
    std::chrono::microseconds spin{100};
    /// Work completions taken from a CQ per ibv_poll_cq call.
    unsigned batch = 32;
};

/// The thread that runs a device's completions: it polls the completion
/// queues made through it (create_cq), watches their channel, the rdma_cm
/// event channel and any fd handed to it through io_uring, and resumes each
/// coroutine whose operation completed, inline, on its own thread. Every
/// connection of a builder shares the builder's event listener. Shared: the user,
/// every CQ and every connection hold a reference; the thread stops with
/// the last one.
///
/// Thread-safe: post(), schedule(), running_in_this_thread(), sleeps() and
/// the accessors; create_cq and call_after are for the event listener
/// thread (as each says). The engine's own hooks (doorbells batched per
/// drain pass, the rdma_cm channel) are private: not part of the API.
class event_listener : public std::enable_shared_from_this<event_listener> {
public:
    /// Starts the event listener thread for `device` (which it keeps
    /// alive). Throws verbs_error naming the call when the completion
    /// channel, io_uring (io_uring_queue_init: a kernel without
    /// io_uring, or io_uring disabled by sysctl or seccomp) or the eventfd
    /// cannot be made.
    CORDMA_API static std::shared_ptr<event_listener> start(std::shared_ptr<device_context> device,
                                                 event_listener_options options = {});

    /// The thread stops when the last shared_ptr from start() (held by the
    /// user, and by every CQ and connection made through the event listener) is
    /// dropped; it is joined unless that happens on the event listener thread itself.
    CORDMA_API ~event_listener();
    event_listener(const event_listener&) = delete;
    event_listener& operator=(const event_listener&) = delete;

    /// The device whose completions it runs.
    const std::shared_ptr<device_context>& device() const noexcept { return device_; }
    /// The options it was started with.
    const event_listener_options& options() const noexcept { return options_; }

    /// A completion queue served by this event listener: each completion's wr_id
    /// must point to a detail::completion_target, which is called on the
    /// event listener thread. The CQ keeps the listener alive, and is destroyed on
    /// the event listener thread (so no event for it can be in flight).
    CORDMA_API std::shared_ptr<completion_queue> create_cq(int entries);

    /// A completion queue of another device, served by this same thread
    /// as the listener's own: one thread runs the completions of every
    /// port a program uses (each rail of a connection over several NICs),
    /// with no hop between threads to join them. The device's completion
    /// channel is made with its first CQ and watched from then on; its
    /// counters join metrics(). `device` equal to device() is create_cq
    /// above. The device's context must stay open while the listener
    /// lives (one from device_context::open always does; one wrapped with
    /// from_native is closed by its owner only after the listener is gone).
    /// Throws verbs_error as create_cq, naming `device`.
    CORDMA_API std::shared_ptr<completion_queue> create_cq(const std::shared_ptr<device_context>& device,
                                                           int entries);

    /// Every device whose completions this listener runs: device() first,
    /// then the others in the order their first CQ was made. Thread-safe.
    CORDMA_API std::vector<std::shared_ptr<device_context>> devices() const;

    /// Runs `fn` on the event listener thread, soon, never inside this call (even
    /// when called on the event listener thread). Thread-safe. Allocates: for set-up,
    /// cross-thread hand-offs and teardown, not for the per-operation path.
    CORDMA_API void post(std::function<void()> fn);

    /// `co_await el->schedule()` continues the coroutine on the
    /// event listener thread (always suspending, resumed from the posted queue).
    /// After it, operations start without a thread hop.
    auto schedule() noexcept {
        struct awaiter {
            event_listener* el;
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> h) { el->post([h] { h.resume(); }); }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }

    /// True when called from the thread running this event listener's
    /// loop: its own thread, or a C API call's thread while that call
    /// drives the loop (lib/engine/event_listener_drive.cpp).
    bool running_in_this_thread() const noexcept {
        return driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
    }

    /// A pending call_after. cancel() (event listener thread only) stops it from
    /// running; the timer itself expires harmlessly later.
    struct timer {
        /// Set by cancel(); the timer's function is skipped when set.
        bool cancelled = false;
        /// Stops the function from running (event listener thread only;
        /// harmless after it ran).
        void cancel() noexcept { cancelled = true; }
    };
    /// Runs `fn` on the event listener thread after `delay`, through an io_uring
    /// timeout (no thread, no allocation beyond `fn`'s): cordma's connect
    /// deadlines and leases, and a user's sleeps and deadlines on that
    /// thread. Event listener thread only; the returned timer's cancel()
    /// stops `fn` from running.
    CORDMA_API std::shared_ptr<timer> call_after(std::chrono::nanoseconds delay, std::function<void()> fn);

    /// How many times the thread went to sleep in io_uring (for tests and
    /// benchmarks of the polling modes).
    std::uint64_t sleeps() const noexcept { return sleeps_.load(std::memory_order_relaxed); }

    /// What every connection (queue pair) served by this event listener
    /// counted, read now (metrics.hpp). Any thread; takes a lock that only
    /// connections opening, breaking and closing also take.
    CORDMA_API metrics_snapshot metrics() const;
    /// Starts its latency histograms (metrics_snapshot::latency) afresh:
    /// snapshots from now on count what completes from now on (and so
    /// does its part of process_metrics). Any thread; counters are not
    /// reset.
    CORDMA_API void reset_latency();
    /// Its connections' pending operations, the `limit` oldest first
    /// (stuck_report.hpp), read on its own thread: from another, waits at
    /// most `wait` for it (a thread that does not answer is named in
    /// `unanswered`); on its own thread, at once.
    CORDMA_API stuck_report stuck(std::size_t limit = 20,
                                  std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

private:
    // The engine's own hooks (lib/engine/event_listener_access.hpp), not
    // part of the API: cordma's layers reach them through that accessor.
    friend class detail::event_listener_access;
    /// The rdma_cm event channel this event listener serves (created on first use):
    /// ids made on it deliver their events to the cm_target in id->context,
    /// on the event listener thread.
    rdma_event_channel* cm_channel();
    /// Event listener thread. True while completions are being handed out
    /// (a drain pass): a work request posted now can wait for the pass to
    /// end and go out in one chain (ring_after_drain).
    bool in_drain_pass() const noexcept { return draining_; }
    /// Event listener thread, during a drain pass: `bell` is rung once the
    /// pass ends (once, however often it is asked). The engine's hook for
    /// batched doorbells; `bell` must stay valid until rung.
    void ring_after_drain(detail::doorbell* bell) noexcept {
        if (bell->pending)
            return;
        bell->pending = true;
        bell->next_pending = doorbells_;
        doorbells_ = bell;
    }

    /// What a caller's drive() came to (lib/engine/event_listener_drive.cpp).
    enum class drive_result {
        /// `done` was set while the caller drove; the loop is free again.
        done,
        /// The caller could not take the loop (event polling, the call
        /// is made on the listener's own thread, or
        /// another thread drives it): `start` was not called. The caller is
        /// counted as waiting; it posts its work, waits for it, then
        /// calls end_wait().
        not_taken,
        /// `start` ran, but the loop went back to the listener thread
        /// before `done` (something only that thread may do: submit to
        /// io_uring, or stop). The caller is counted as waiting; it waits
        /// for its work, then calls end_wait().
        handed_back,
    };
    drive_result drive(void (*start)(void*), void* arg, const std::atomic<bool>& done);
    void end_wait() noexcept { waiting_callers_.fetch_sub(1); }
    bool take_loop() noexcept;
    void release_loop(bool want_listener) noexcept;
    void park() noexcept;
    bool sleep_holding_loop(const std::atomic<bool>& done) noexcept;
    void watch_for_sleeping_caller() noexcept;
    void wake_parked() noexcept;
    bool on_own_thread() const noexcept { return std::this_thread::get_id() == thread_id_; }

    event_listener(std::shared_ptr<device_context> device, event_listener_options options);
    void ring_doorbells() noexcept;
    struct handle;
    void request_stop() noexcept;
    void run() noexcept;
    void run_loop();
    bool drain(completion_queue& cq);
    bool drain_all();
    bool poll_turn();
    void drain_backlog();
    void arm_all();
    void on_channel_ready(completion_channel& channel, detail::uring_target* watch, bool& owed);
    void on_wakeup();
    void on_cm_ready();
    void run_posted();
    void retire_cq(completion_queue* cq) noexcept;
    void submit_poll(int fd, detail::uring_target* target);
    unsigned reap_uring();

    std::shared_ptr<device_context> device_;
    event_listener_options options_;
    std::shared_ptr<completion_channel> channel_;
    std::unique_ptr<io_uring> ring_;
    int wakeup_fd_ = -1;

    struct channel_watch : detail::uring_target { event_listener* self; } channel_watch_{};
    // Another device's completion channel (create_cq(device, ...)): made
    // by the first caller for that device, under others_mutex_; watched by
    // the loop from then on (`owed` is loop state, as channel_watch_owed_).
    // Kept until the listener goes: io_uring may hold a poll on its fd.
    struct other_channel : detail::uring_target {
        event_listener* self = nullptr;
        std::shared_ptr<device_context> device;
        std::shared_ptr<completion_channel> channel;
        bool owed = false;
    };
    mutable std::mutex others_mutex_;
    std::vector<std::unique_ptr<other_channel>> others_;
    // The loop's list of the others it watches (loop state).
    std::vector<other_channel*> watched_others_;
    other_channel& other_channel_for(const std::shared_ptr<device_context>& device);
    std::shared_ptr<completion_queue> serve_cq(std::shared_ptr<completion_queue> cq);
    struct wakeup_watch : detail::uring_target { event_listener* self; } wakeup_watch_{};
    struct cm_watch : detail::uring_target { event_listener* self; } cm_watch_{};
    // The completion channel's and the eventfd's polls, fired while a
    // caller drove the loop: re-armed when the listener thread takes it
    // back (park), as only it submits and only it sleeps on them (a
    // caller re-arming them would hand the loop back at once).
    // Owned, as the other loop state, by whoever runs the loop.
    bool channel_watch_owed_ = false;
    bool wakeup_watch_owed_ = false;
    void rearm_watch(int fd, detail::uring_target* target, bool& owed);
    // The listener thread: submits the watches rearm_watch left owed.
    void submit_owed_watches();
    // Wakes the thread from io_uring: a write to its eventfd.
    void write_wakeup() noexcept;
    std::once_flag cm_once_;
    rdma_event_channel* cm_channel_ = nullptr;

    // Event listener thread only.
    struct timer_entry;
    std::unordered_set<timer_entry*> timers_;
    std::vector<completion_queue*> cqs_;
    std::vector<ibv_wc> wcs_;
    bool draining_ = false;
    // The coarse clock in milliseconds (CLOCK_MONOTONIC_COARSE), read once
    // per turn of the loop: what pending operations are stamped with
    // (stuck_report.hpp). Written and read on the loop's thread only.
    std::uint64_t turn_ms_ = 0;
    // The tick clock (lib/core/tick_clock.hpp), read with turn_ms_: where
    // operations' latencies start and end.
    std::uint64_t turn_tick_ = 0;
    void start_turn() noexcept;
    // Event mode: a CQ still had completions when a wakeup's drain budget
    // ran out; run_loop drains on after a look at io_uring, not a sleep.
    bool backlog_ = false;
    std::size_t backlog_next_ = 0;
    detail::doorbell* doorbells_ = nullptr;

    std::mutex posted_mutex_;
    std::vector<std::function<void()>> posted_;
    std::vector<std::function<void()>> running_;
    // A polling loop looks at posted_flag_ on every turn, so post() wakes
    // the thread through wakeup_fd_ (a write, then a read and a re-armed
    // poll on this side: three system calls) only while may_sleep_ says
    // it may be asleep: always in event mode, around an adaptive sleep.
    std::atomic<bool> posted_flag_{false};
    std::atomic<bool> may_sleep_{true};

    // Who runs the loop (event_listener_drive.cpp): the listener thread, or
    // a C call's thread for as long as that call waits (busy and yielding
    // polling), so that the call needs no hand-off between threads.
    // loop_state_ passes the loop's state (everything "event listener
    // thread only") from one to the other, with acquire and release.
    // caller_sleeps: a caller holding the loop sleeps (adaptive polling,
    // its spin window over); the parked listener thread waits in io_uring
    // for it and hands the loop back to it, awake, when anything comes.
    enum : int { listener_runs, park_asked, loop_free, caller_runs, caller_sleeps };
    std::atomic<int> loop_state_{listener_runs};
    // A caller sleeping with the loop waits on this word; the listener
    // thread bumps it when it hands the loop back.
    std::atomic<std::uint32_t> watch_word_{0};
    std::atomic<std::thread::id> driver_{};
    // The parked listener thread's futex word: bumped to wake it.
    std::atomic<std::uint32_t> park_word_{0};
    // Loops taken by callers (the parked thread takes the loop back once
    // no caller has come for a whole park period).
    std::atomic<std::uint64_t> drives_{0};
    // Callers waiting for work the loop must run (not driving it), and a
    // caller's request that the listener thread take the loop back.
    std::atomic<int> waiting_callers_{0};
    std::atomic<bool> listener_wanted_{false};

    std::atomic<bool> stopping_{false};
    std::atomic<std::uint64_t> sleeps_{0};
    // The connections counted for metrics() (lib/engine/connection_registry.hpp).
    std::unique_ptr<detail::connection_registry> connections_;
    std::thread thread_;
    std::thread::id thread_id_;
};

}  // namespace cordma
