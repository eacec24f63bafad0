// The event listener's loop, one way per polling mode (event, busy,
// adaptive, yielding): completions drained from the CQs in bounded passes,
// the doorbells rung at the end of each pass, io_uring looked at between
// them, and the arming of the CQs before sleeping.
#include <cordma/event_listener.hpp>

#include <liburing.h>
#include <sched.h>

#include <chrono>

#include "core/coarse_clock.hpp"
#include "core/tick_clock.hpp"

namespace cordma {

namespace {
/// Drain passes (each up to a batch of completions) per wakeup before
/// io_uring gets a look.
constexpr unsigned drain_budget = 16;
}  // namespace

// The race-free order: take every pending event, ack them, re-arm, and only
// then drain. A completion that lands after the drain has started fires the
// freshly armed channel again, so none is ever left waiting.
//
// Bounded: under load every completion resumes a coroutine that posts again,
// and a CQ can stay full for as long as the load lasts. Draining it until it
// is empty would starve everything else that comes through io_uring: timers
// (every deadline and timeout), posted functions and rdma_cm events (a
// disconnect). After drain_budget drain passes the rest waits for
// run_loop, which looks at io_uring without sleeping and drains on.
void event_listener::on_channel_ready(completion_channel& channel, detail::uring_target* watch, bool& owed) {
    // Every drain costs one unit, full batch or not: under load each pass
    // makes new completions, and so new channel events, as it goes.
    unsigned budget = drain_budget;
    while (!backlog_) {
        completion_queue* cq = channel.try_get_event();
        if (cq == nullptr)
            break;
        cq->ack_events(1);
        if (options_.mode == polling_mode::event)
            cq->request_notify();
        bool full = true;
        while (full && budget > 0) {
            full = drain(*cq);
            --budget;
        }
        // Out of budget: what is left in the CQs (and events left on the
        // channel, which fire its poll again) waits for run_loop.
        if (budget == 0)
            backlog_ = true;
    }
    rearm_watch(channel.fd(), watch, owed);
}

void event_listener::drain_backlog() {
    backlog_ = false;
    unsigned budget = drain_budget;
    // Round robin, so that one busy CQ does not keep the others waiting.
    for (std::size_t k = 0; k < cqs_.size(); ++k) {
        std::size_t i = (backlog_next_ + k) % cqs_.size();
        bool full = true;
        while (full && budget > 0) {
            full = drain(*cqs_[i]);
            --budget;
        }
        if (budget == 0) {
            backlog_ = true;
            backlog_next_ = i + 1;
            return;
        }
    }
}

bool event_listener::drain(completion_queue& cq) {
    int n = cq.poll(wcs_);
    // Each batch found is a turn of its own: a request posted while the
    // last batch was handled may have completed already (rxe completes a
    // loopback request inside its post), and its latency must not read 0.
    if (n > 0)
        start_turn();
    draining_ = true;
    for (int i = 0; i < n; ++i) {
        auto* target = detail::completion_target::from_wr_id(wcs_[i].wr_id);
        target->on_complete(target, wcs_[i]);
    }
    ring_doorbells();
    return n == static_cast<int>(wcs_.size());
}

bool event_listener::drain_all() {
    bool any = false;
    for (std::size_t i = 0; i < cqs_.size(); ++i) {
        // Index, not iterator: a resumed coroutine may create a CQ.
        completion_queue* cq = cqs_[i];
        int n = cq->poll(wcs_);
        if (n == 0)
            continue;
        start_turn();  // each batch a turn (drain says why)
        draining_ = true;
        for (int k = 0; k < n; ++k) {
            auto* target = detail::completion_target::from_wr_id(wcs_[k].wr_id);
            target->on_complete(target, wcs_[k]);
        }
        ring_doorbells();
        any = true;
    }
    return any;
}

// The end of a drain pass: every chain built during it goes out now. A bell
// may fail requests and resume their coroutines, which may post again: those
// posts are still part of the pass and wait in a new chain, rung next round.
void event_listener::ring_doorbells() noexcept {
    while (doorbells_ != nullptr) {
        detail::doorbell* bell = doorbells_;
        doorbells_ = bell->next_pending;
        bell->next_pending = nullptr;
        bell->pending = false;
        bell->ring(bell);
    }
    draining_ = false;
}

void event_listener::arm_all() {
    for (completion_queue* cq : cqs_)
        cq->request_notify();
}

void event_listener::start_turn() noexcept {
    // A few nanoseconds: the coarse clock reads the vDSO's last tick, not
    // the clock source (1.7 us a read on an emulated guest's HPET).
    turn_ms_ = detail::coarse_clock::now_ms();
#ifndef CORDMA_METRICS_OFF
    turn_tick_ = detail::tick_clock::now();
#endif
}

unsigned event_listener::reap_uring() {
    // Event mode: once per wake, before anything it wakes for runs.
    start_turn();
    unsigned handled = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(ring_.get(), &cqe) == 0 && cqe != nullptr) {
        auto* target = static_cast<detail::uring_target*>(io_uring_cqe_get_data(cqe));
        int result = cqe->res;
        io_uring_cqe_seen(ring_.get(), cqe);
        if (target != nullptr)
            target->on_ready(target, result);
        ++handled;
    }
    return handled;
}

bool event_listener::poll_turn() {
    // The turn's time is read only when it finds work (drain_all, here,
    // reap_uring): an idle spin reads no clock.
    bool active = drain_all();
    if (posted_flag_.load(std::memory_order_relaxed) && posted_flag_.exchange(false, std::memory_order_acquire)) {
        if (!active)
            start_turn();
        run_posted();
        active = true;
    }
    // io_uring_peek_cqe calls into liburing even when nothing is there;
    // io_uring_cq_ready is two loads (plus the flag saying completions
    // overflowed and only a peek brings them in).
    if (io_uring_cq_ready(ring_.get()) > 0 || (IO_URING_READ_ONCE(*ring_->sq.kflags) & IORING_SQ_CQ_OVERFLOW) != 0)
        active |= reap_uring() > 0;
    return active;
}

void event_listener::run_loop() {
    submit_poll(wakeup_fd_, &wakeup_watch_);
    submit_poll(channel_->fd(), &channel_watch_);
    io_uring_submit(ring_.get());
    auto last_activity = std::chrono::steady_clock::now();
    bool idle_since_activity = false;
    if (options_.mode != polling_mode::event)
        may_sleep_.store(false);
    while (!stopping_.load(std::memory_order_acquire)) {
        // A C call's thread asks for the loop (event_listener_drive.cpp):
        // one load per turn. Not in event polling, where callers post.
        if (loop_state_.load(std::memory_order_relaxed) == park_asked) {
            park();
            continue;
        }
        if (options_.mode == polling_mode::event) {
            if (backlog_) {
                io_uring_submit(ring_.get());
                reap_uring();
                drain_backlog();
                continue;
            }
            sleeps_.fetch_add(1, std::memory_order_relaxed);
            io_uring_submit_and_wait(ring_.get(), 1);
            reap_uring();
            continue;
        }
        bool active = poll_turn();
        if (io_uring_sq_ready(ring_.get()) > 0)
            io_uring_submit(ring_.get());
        // Busy mode never needs the time, and reading the clock is not free
        // (1.7 us per read on an HPET clocksource, as in emulated guests).
        if (options_.mode == polling_mode::busy)
            continue;
        if (options_.mode == polling_mode::yielding) {
            if (!active)
                sched_yield();
            continue;
        }
        if (active) {
            idle_since_activity = false;
            continue;
        }
        auto now = std::chrono::steady_clock::now();
        if (!idle_since_activity) {
            // The first empty poll after activity starts the spin.
            idle_since_activity = true;
            last_activity = now;
        }
        if (now - last_activity < options_.spin)
            continue;
        // Adaptive, idle: arm, then look once more for completions that
        // arrived before the arming took effect, and only then sleep.
        // A caller asking for the loop (take_loop) wakes the thread only
        // if it saw may_sleep_: after the store, look at its request.
        arm_all();
        may_sleep_.store(true);
        if (drain_all() || posted_flag_.load() || loop_state_.load() == park_asked) {
            may_sleep_.store(false, std::memory_order_relaxed);
            idle_since_activity = false;
            continue;
        }
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        io_uring_submit_and_wait(ring_.get(), 1);
        may_sleep_.store(false, std::memory_order_relaxed);
        reap_uring();
        idle_since_activity = false;
    }
}

}  // namespace cordma
