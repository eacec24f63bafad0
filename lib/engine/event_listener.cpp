// The event listener's life: its thread started and joined (or detached
// when the last handle goes on that thread, and waited for at exit), the
// io_uring ring and wakeup eventfd made and closed, the CQs it drains, and
// what it lets go of when it stops. The loop that drains completions is in
// event_listener_polling.cpp; posted functions, timers and rdma_cm events,
// which arrive through io_uring, in event_listener_uring.cpp.
#include <cordma/event_listener.hpp>

#include <cordma/error.hpp>

#include <liburing.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <future>
#include <mutex>
#include <utility>

#include "engine/connection_registry.hpp"
#include "engine/metrics_endpoint_share.hpp"
#include "engine/process_metrics.hpp"
#include "engine/stuck_dump.hpp"
#include "engine/event_listener_timer.hpp"
#include "engine/exit_wait.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace cordma {

namespace {

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

void detail::exit_wait_begin() noexcept {
    wait_at_exit();
    detached_threads& d = detached();
    std::lock_guard lock(d.mutex);
    ++d.running;
}

void detail::exit_wait_after_statics() noexcept {
    wait_at_exit();
    (void)std::atexit(wait_for_detached_threads);
}

void detail::exit_wait_end() noexcept {
    detached_threads& d = detached();
    std::lock_guard lock(d.mutex);
    if (--d.running == 0)
        d.none_running.notify_all();
}

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
        // Its own thread, not a C call's driving the loop: only the
        // listener thread itself cannot join itself.
        if (el->on_own_thread()) {
            detail::exit_wait_begin();
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
    detail::start_environment_metrics_endpoint();
    detail::start_environment_stuck_dump();
    std::shared_ptr<event_listener> el(new event_listener(std::move(device), options));
    std::promise<void> started;
    auto ready = started.get_future();
    el->thread_ = std::thread([self = el, &started]() mutable {
        self->thread_id_ = std::this_thread::get_id();
        self->driver_.store(self->thread_id_, std::memory_order_relaxed);
        started.set_value();
        self->run();
        // The listener goes here (if this is its last reference), while an
        // exit that has begun still waits for this thread.
        self.reset();
        if (detached_this_thread)
            detail::exit_wait_end();
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
    connections_ = std::make_unique<detail::connection_registry>();
    start_turn();
    channel_watch_.self = this;
    channel_watch_.on_ready = [](detail::uring_target* t, int) noexcept {
        event_listener* self = static_cast<channel_watch*>(t)->self;
        self->on_channel_ready(*self->channel_, t, self->channel_watch_owed_);
    };
    wakeup_watch_.self = this;
    wakeup_watch_.on_ready = [](detail::uring_target* t, int) noexcept {
        static_cast<wakeup_watch*>(t)->self->on_wakeup();
    };
    detail::enlist(this);  // last: nothing after it throws
}

metrics_snapshot event_listener::metrics() const {
    metrics_snapshot m = connections_->snapshot();
    // Each device once (a device may be open in more than one context).
    std::vector<std::string> read;
    for (const auto& device : devices()) {
        if (!device || std::find(read.begin(), read.end(), device->name()) != read.end())
            continue;
        read.push_back(device->name());
        detail::add_device_counters(*device, m.devices);
    }
    return m;
}

void event_listener::reset_latency() { connections_->reset_latency(); }

event_listener::~event_listener() {
    detail::delist(this);
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
    stopping_.store(true);
    write_wakeup();
    wake_parked();  // a thread parked while callers drove: it stops too
}

std::shared_ptr<completion_queue> event_listener::create_cq(int entries) {
    return serve_cq(completion_queue::create(device_, entries, channel_));
}

std::shared_ptr<completion_queue> event_listener::create_cq(const std::shared_ptr<device_context>& device,
                                                            int entries) {
    if (!device || device == device_ || device->native_handle() == device_->native_handle())
        return create_cq(entries);
    return serve_cq(completion_queue::create(device, entries, other_channel_for(device).channel));
}

std::vector<std::shared_ptr<device_context>> event_listener::devices() const {
    std::vector<std::shared_ptr<device_context>> all{device_};
    std::lock_guard lock(others_mutex_);
    for (const auto& other : others_)
        all.push_back(other->device);
    return all;
}

event_listener::other_channel& event_listener::other_channel_for(const std::shared_ptr<device_context>& device) {
    std::lock_guard lock(others_mutex_);
    for (const auto& other : others_)
        if (other->device->native_handle() == device->native_handle())
            return *other;
    auto other = std::make_unique<other_channel>();
    other->self = this;
    other->device = device;
    other->channel = completion_channel::create(device);
    other->on_ready = [](detail::uring_target* t, int) noexcept {
        auto* c = static_cast<other_channel*>(t);
        c->self->on_channel_ready(*c->channel, c, c->owed);
    };
    other_channel* raw = other.get();
    // Watched from the loop, before the CQ made with it (posted after
    // this) is polled: a completion already there makes the first poll
    // fire at once.
    post([this, raw] {
        watched_others_.push_back(raw);
        rearm_watch(raw->channel->fd(), raw, raw->owed);
    });
    others_.push_back(std::move(other));
    return *raw;
}

std::shared_ptr<completion_queue> event_listener::serve_cq(std::shared_ptr<completion_queue> cq) {
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

void event_listener::retire_cq(completion_queue* cq) noexcept {
    std::erase(cqs_, cq);
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

}  // namespace cordma
