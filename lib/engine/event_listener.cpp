#include <cordma/event_listener.hpp>

#include <cordma/error.hpp>

#include <liburing.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <utility>

#include "engine/cm_target.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace cordma {

namespace {
/// Drain passes (each up to a batch of completions) per wakeup before
/// io_uring gets a look.
constexpr unsigned drain_budget = 16;

// liburing maps and unmaps a ring's queues with raw system calls, which
// ThreadSanitizer does not see: to it, a ring mapped where an earlier
// listener's ring was unmapped is that same memory, and the new listener
// thread's first touch races the old thread's last (reported when the old
// thread was detached, so never joined). The kernel orders the two: the old
// mapping is gone before a new one can take its addresses. Tell TSan so, with
// a release before a ring is unmapped and an acquire once one is mapped;
// races between two threads on one live ring are still reported.
#if defined(__SANITIZE_THREAD__)
char ring_handover;
void ring_mapped() noexcept { __tsan_acquire(&ring_handover); }
void ring_unmapping() noexcept { __tsan_release(&ring_handover); }
#else
void ring_mapped() noexcept {}
void ring_unmapping() noexcept {}
#endif

// Listener threads whose last handle went on their own thread: detached, so
// nobody joins them, yet each still tears its listener down (what was posted
// last, pending work failed, CQs, ring, device). A program that drops its
// last handle that way and returns from main at once had exit's destructors
// run under that teardown (a work_completion_error built from a destroyed
// category crashed sharing_asan and agent_flow_asan at exit). So exit waits
// for them, for at most 10 s, before any static of cordma's is destroyed.
struct detached_threads {
    std::mutex mutex;
    std::condition_variable none_running;
    int running = 0;
};

detached_threads& detached() {
    static auto* threads = new detached_threads;  // never destroyed: exit uses it
    return *threads;
}

thread_local bool detached_this_thread = false;

void wait_for_detached_threads() noexcept {
    detached_threads& d = detached();
    std::unique_lock lock(d.mutex);
    d.none_running.wait_for(lock, std::chrono::seconds(10), [&] { return d.running == 0; });
}

// exit runs atexit functions and static destructors in the reverse order of
// their registration: the statics a teardown touches are made first, so
// that the wait runs before their destructors.
void wait_at_exit() noexcept {
    static const bool registered = [] {
        (void)work_completion_category();
        (void)detached();
        return std::atexit(wait_for_detached_threads) == 0;
    }();
    (void)registered;
}

}  // namespace

const char* to_string(polling_mode mode) noexcept {
    switch (mode) {
    case polling_mode::event: return "event";
    case polling_mode::busy: return "busy";
    case polling_mode::adaptive: return "adaptive";
    case polling_mode::yielding: return "yielding";
    }
    return "unknown";
}

// What users hold. Its destruction (the last user reference, CQ or connection
// gone) stops the thread; the thread holds the listener itself, so a last
// reference dropped on the event listener thread detaches instead of self-joining.
struct event_listener::handle {
    std::shared_ptr<event_listener> el;
    handle() = default;
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    ~handle() {
        if (!el)
            return;
        el->request_stop();
        if (el->running_in_this_thread()) {
            detached_threads& d = detached();
            std::lock_guard lock(d.mutex);
            ++d.running;
            detached_this_thread = true;
            el->thread_.detach();
        } else if (el->thread_.joinable()) {
            el->thread_.join();
        }
    }
};

std::shared_ptr<event_listener> event_listener::start(std::shared_ptr<device_context> device,
                                                      event_listener_options options) {
    wait_at_exit();
    std::shared_ptr<event_listener> el(new event_listener(std::move(device), options));
    std::promise<void> started;
    auto ready = started.get_future();
    el->thread_ = std::thread([self = el, &started]() mutable {
        self->thread_id_ = std::this_thread::get_id();
        started.set_value();
        self->run();
        // The listener goes here (if this is its last reference), while an
        // exit that has begun still waits for this thread.
        self.reset();
        if (detached_this_thread) {
            detached_threads& d = detached();
            std::lock_guard lock(d.mutex);
            if (--d.running == 0)
                d.none_running.notify_all();
        }
    });
    ready.wait();
    auto h = std::make_shared<handle>();
    h->el = std::move(el);
    return std::shared_ptr<event_listener>(h, h->el.get());
}

event_listener::event_listener(std::shared_ptr<device_context> device, event_listener_options options)
    : device_(std::move(device)), options_(options), channel_(completion_channel::create(device_)),
      ring_(std::make_unique<io_uring>()), wcs_(options.batch == 0 ? 32 : options.batch) {
    detail::check_errno_return(io_uring_queue_init(64, ring_.get(), 0),
                               [] { return std::string("io_uring_queue_init(entries=64)"); });
    ring_mapped();
    wakeup_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakeup_fd_ == -1) {
        int saved = errno;
        io_uring_queue_exit(ring_.get());
        detail::throw_verbs_error(saved, "eventfd()");
    }
    channel_watch_.self = this;
    channel_watch_.on_ready = [](detail::uring_target* t, int) noexcept {
        static_cast<channel_watch*>(t)->self->on_channel_ready();
    };
    wakeup_watch_.self = this;
    wakeup_watch_.on_ready = [](detail::uring_target* t, int) noexcept {
        static_cast<wakeup_watch*>(t)->self->on_wakeup();
    };
}

struct event_listener::timer_entry : detail::uring_target {
    __kernel_timespec timeout{};
    std::function<void()> fn;
    std::shared_ptr<event_listener::timer> handle;
    event_listener* owner = nullptr;
};

event_listener::~event_listener() {
    // Timers still pending when the thread stopped never fire.
    for (timer_entry* entry : timers_)
        delete entry;
    if (cm_channel_ != nullptr)
        rdma_destroy_event_channel(cm_channel_);
    ring_unmapping();
    io_uring_queue_exit(ring_.get());
    close(wakeup_fd_);
}

void event_listener::request_stop() noexcept {
    stopping_.store(true, std::memory_order_release);
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(wakeup_fd_, &one, sizeof one);
}

std::shared_ptr<completion_queue> event_listener::create_cq(int entries) {
    auto cq = completion_queue::create(device_, entries, channel_);
    // Armed before anyone can post to it, so event mode never misses its
    // first completion; the other modes re-arm before they sleep.
    cq->request_notify();
    completion_queue* raw = cq.get();
    post([this, raw] { cqs_.push_back(raw); });
    // The CQ is destroyed on the event listener thread, between batches, so no
    // channel event or poll loop can still be looking at it.
    std::shared_ptr<event_listener> keep_alive = shared_from_this();
    auto holder = std::make_shared<std::shared_ptr<completion_queue>>(std::move(cq));
    return std::shared_ptr<completion_queue>(raw, [holder, keep_alive](completion_queue* p) {
        keep_alive->post([holder, p, keep_alive] {
            keep_alive->retire_cq(p);
            holder->reset();
        });
    });
}

rdma_event_channel* event_listener::cm_channel() {
    std::call_once(cm_once_, [this] {
        errno = 0;
        rdma_event_channel* channel = detail::check_pointer(rdma_create_event_channel(), [] {
            return std::string("rdma_create_event_channel(): is the rdma_ucm module loaded?");
        });
        int flags = fcntl(channel->fd, F_GETFL);
        if (flags == -1 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) == -1) {
            int saved = errno;
            rdma_destroy_event_channel(channel);
            detail::throw_verbs_error(saved, "fcntl(rdma_cm event channel fd, O_NONBLOCK)");
        }
        cm_channel_ = channel;
        cm_watch_.self = this;
        cm_watch_.on_ready = [](detail::uring_target* t, int) noexcept { static_cast<cm_watch*>(t)->self->on_cm_ready(); };
        if (running_in_this_thread())
            submit_poll(channel->fd, &cm_watch_);
        else
            post([this] { submit_poll(cm_channel_->fd, &cm_watch_); });
    });
    return cm_channel_;
}

void event_listener::on_cm_ready() {
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(cm_channel_, &event) == 0) {
        detail::cm_event_copy copy;
        copy.type = event->event;
        copy.status = event->status;
        copy.id = event->id;
        copy.listen_id = event->listen_id;
        const rdma_conn_param& param = event->param.conn;
        if (param.private_data != nullptr && param.private_data_len > 0) {
            copy.private_data_len = static_cast<std::uint8_t>(std::min<std::size_t>(param.private_data_len, detail::cm_event_copy::max_private_data));
            std::memcpy(copy.private_data.data(), param.private_data, copy.private_data_len);
        }
        copy.responder_resources = param.responder_resources;
        copy.initiator_depth = param.initiator_depth;
        // A connect request arrives on the new id, whose context is still the
        // listening id's: both point to the listener's target.
        auto* target = static_cast<detail::cm_target*>(event->id->context);
        rdma_ack_cm_event(event);
        if (target != nullptr)
            target->on_event(target, copy);
    }
    submit_poll(cm_channel_->fd, &cm_watch_);
}


std::shared_ptr<event_listener::timer> event_listener::call_after(std::chrono::nanoseconds delay,
                                                                  std::function<void()> fn) {
    auto* entry = new timer_entry;
    entry->owner = this;
    timers_.insert(entry);
    entry->timeout.tv_sec = delay.count() / 1'000'000'000;
    entry->timeout.tv_nsec = delay.count() % 1'000'000'000;
    entry->fn = std::move(fn);
    entry->handle = std::make_shared<timer>();
    entry->on_ready = [](detail::uring_target* t, int) noexcept {
        std::unique_ptr<timer_entry> self(static_cast<timer_entry*>(t));
        self->owner->timers_.erase(self.get());
        if (!self->handle->cancelled)
            self->fn();
    };
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {
        io_uring_submit(ring_.get());
        sqe = io_uring_get_sqe(ring_.get());
    }
    io_uring_prep_timeout(sqe, &entry->timeout, 0, 0);
    io_uring_sqe_set_data(sqe, entry);
    // The kernel reads the timespec at submission: submit now, so a busy
    // listener that never sleeps still starts the clock.
    io_uring_submit(ring_.get());
    return entry->handle;
}

void event_listener::retire_cq(completion_queue* cq) noexcept {
    std::erase(cqs_, cq);
}

void event_listener::post(std::function<void()> fn) {
    {
        std::lock_guard lock(posted_mutex_);
        posted_.push_back(std::move(fn));
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(wakeup_fd_, &one, sizeof one);
}

void event_listener::submit_poll(int fd, detail::uring_target* target) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {
        // The ring is full of unsubmitted entries: hand them to the kernel.
        io_uring_submit(ring_.get());
        sqe = io_uring_get_sqe(ring_.get());
    }
    io_uring_prep_poll_add(sqe, fd, POLLIN);
    io_uring_sqe_set_data(sqe, target);
}

void event_listener::run_posted() {
    {
        std::lock_guard lock(posted_mutex_);
        running_.swap(posted_);
    }
    for (auto& fn : running_) {
        try {
            fn();
        } catch (const std::exception& e) {
            detail::logf(log_level::error, "cordma: event_listener: a posted function threw: %s", e.what());
            std::terminate();
        }
    }
    running_.clear();
}

void event_listener::on_wakeup() {
    std::uint64_t count;
    [[maybe_unused]] auto n = read(wakeup_fd_, &count, sizeof count);
    run_posted();
    submit_poll(wakeup_fd_, &wakeup_watch_);
}

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
void event_listener::on_channel_ready() {
    // Every drain costs one unit, full batch or not: under load each pass
    // makes new completions, and so new channel events, as it goes.
    unsigned budget = drain_budget;
    while (!backlog_) {
        completion_queue* cq = channel_->try_get_event();
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
    submit_poll(channel_->fd(), &channel_watch_);
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

unsigned event_listener::reap_uring() {
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

void event_listener::run() noexcept {
    try {
        run_loop();
        // Stopping: whatever was posted last (CQ retirements) still runs.
        for (;;) {
            {
                std::lock_guard lock(posted_mutex_);
                if (posted_.empty())
                    break;
            }
            run_posted();
        }
        // Timers that never fired let go of their callbacks (and whatever
        // those keep alive: agents, leases) here, on this thread. Each
        // callback's destruction may post or add timers: repeat until quiet.
        for (;;) {
            auto pending = std::exchange(timers_, {});
            bool posted = false;
            {
                std::lock_guard lock(posted_mutex_);
                posted = !posted_.empty();
            }
            if (pending.empty() && !posted)
                break;
            for (timer_entry* entry : pending)
                delete entry;
            run_posted();
        }
    } catch (const std::exception& e) {
        detail::logf(log_level::error, "cordma: event_listener on %s failed: %s", device_->name().c_str(), e.what());
        std::terminate();
    }
}

void event_listener::run_loop() {
    submit_poll(wakeup_fd_, &wakeup_watch_);
    submit_poll(channel_->fd(), &channel_watch_);
    io_uring_submit(ring_.get());
    auto last_activity = std::chrono::steady_clock::now();
    bool idle_since_activity = false;
    while (!stopping_.load(std::memory_order_acquire)) {
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
        bool active = drain_all();
        // io_uring_peek_cqe calls into liburing even when nothing is there;
        // io_uring_cq_ready is two loads (plus the flag saying completions
        // overflowed and only a peek brings them in).
        if (io_uring_cq_ready(ring_.get()) > 0 ||
            (IO_URING_READ_ONCE(*ring_->sq.kflags) & IORING_SQ_CQ_OVERFLOW) != 0)
            active |= reap_uring() > 0;
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
        arm_all();
        if (drain_all()) {
            idle_since_activity = false;
            continue;
        }
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        io_uring_submit_and_wait(ring_.get(), 1);
        reap_uring();
        idle_since_activity = false;
    }
}

}  // namespace cordma
