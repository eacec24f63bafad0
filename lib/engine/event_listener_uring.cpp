// The event listener, what arrives through io_uring besides completions:
// functions posted from other threads (woken through an eventfd), timers
// (call_after, io_uring timeouts), and the rdma_cm event channel, made on
// first use.
#include <cordma/event_listener.hpp>

#include <liburing.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "engine/cm_target.hpp"
#include "engine/event_listener_timer.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"

namespace cordma {

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
    // listener that never sleeps still starts the clock. Only the
    // listener's own thread submits (the timeout's completion goes to the
    // thread that submitted it): a caller driving the loop hands it back
    // to the listener thread once its turn made an entry to submit
    // (event_listener_drive.cpp).
    if (on_own_thread())
        io_uring_submit(ring_.get());
    return entry->handle;
}

void event_listener::post(std::function<void()> fn) {
    {
        std::lock_guard lock(posted_mutex_);
        posted_.push_back(std::move(fn));
    }
    // Both sequentially consistent, as the loop's store of may_sleep_ and
    // load of posted_flag_ before it sleeps: one side sees the other.
    posted_flag_.store(true);
    // Nobody runs the loop (the listener thread parked, the caller that
    // drove it gone): the parked thread takes it back for this.
    if (loop_state_.load() == loop_free)
        wake_parked();
    if (may_sleep_.load())
        write_wakeup();
}

void event_listener::write_wakeup() noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(wakeup_fd_, &one, sizeof one);
}

void event_listener::submit_owed_watches() {
    if (std::exchange(channel_watch_owed_, false))
        submit_poll(channel_->fd(), &channel_watch_);
    for (other_channel* other : watched_others_)
        if (std::exchange(other->owed, false))
            submit_poll(other->channel->fd(), other);
    if (std::exchange(wakeup_watch_owed_, false))
        submit_poll(wakeup_fd_, &wakeup_watch_);
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
    rearm_watch(wakeup_fd_, &wakeup_watch_, wakeup_watch_owed_);
}

void event_listener::rearm_watch(int fd, detail::uring_target* target, bool& owed) {
    if (on_own_thread())
        submit_poll(fd, target);
    else
        owed = true;  // park() re-arms it as the listener thread takes the loop back
}

}  // namespace cordma
