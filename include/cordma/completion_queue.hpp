#pragma once
/// \file
/// A completion channel (the fd that becomes readable when an armed CQ gets a
/// completion) and a completion queue (ibv_cq).

#include <cordma/export.hpp>
#include <cstdint>
#include <memory>
#include <span>

#include <infiniband/verbs.h>

#include <cordma/device.hpp>

namespace cordma {

class completion_queue;

/// An ibv_comp_channel whose fd is non-blocking, so it can be watched by an
/// event loop (cordma's event_listener polls it through io_uring).
class CORDMA_API completion_channel {
public:
    /// Creates a channel on `device` (which it keeps alive) and makes its fd
    /// non-blocking. Throws verbs_error naming ibv_create_comp_channel or
    /// fcntl and the device when either fails.
    static std::shared_ptr<completion_channel> create(std::shared_ptr<device_context> device);

    ~completion_channel();
    completion_channel(const completion_channel&) = delete;
    completion_channel& operator=(const completion_channel&) = delete;

    /// The libibverbs channel, for verbs calls cordma does not wrap; owned
    /// by this object, valid while it lives.
    ibv_comp_channel* native_handle() const noexcept { return channel_; }
    /// The channel's non-blocking fd: readable when an armed CQ of this
    /// channel has a completion. Watch it, do not close it.
    int fd() const noexcept { return channel_->fd; }

    /// Takes one pending event off the channel: the CQ that fired (its
    /// cq_context is the completion_queue*), or nullptr if none is pending.
    /// The caller must ack it with completion_queue::ack_events.
    completion_queue* try_get_event();

private:
    completion_channel(std::shared_ptr<device_context> device, ibv_comp_channel* channel)
        : device_(std::move(device)), channel_(channel) {}

    std::shared_ptr<device_context> device_;
    ibv_comp_channel* channel_;
};

/// A completion queue. With a channel it can be armed (request_notify) so the
/// channel's fd reports the next completion; without one it can only be polled.
class CORDMA_API completion_queue {
public:
    /// Creates a CQ of at least `entries` entries on `device`, reporting to
    /// `channel` when armed (none: poll only). Keeps both alive. Throws
    /// verbs_error naming ibv_create_cq, the device and the entries (a
    /// device caps entries at its max_cqe).
    static std::shared_ptr<completion_queue> create(std::shared_ptr<device_context> device, int entries,
                                                    std::shared_ptr<completion_channel> channel = nullptr);

    ~completion_queue();
    completion_queue(const completion_queue&) = delete;
    completion_queue& operator=(const completion_queue&) = delete;

    /// The libibverbs CQ, owned by this object, valid while it lives.
    ibv_cq* native_handle() const noexcept { return cq_; }
    /// The entries the device gave it (at least those asked for).
    int entries() const noexcept { return cq_->cqe; }
    /// The device the CQ was created on.
    const std::shared_ptr<device_context>& device() const noexcept { return device_; }
    /// The channel it reports to when armed, or nullptr (poll only).
    const std::shared_ptr<completion_channel>& channel() const noexcept { return channel_; }

    /// Polls up to out.size() completions; returns how many were written
    /// (0: none pending). Does not block. Throws verbs_error naming
    /// ibv_poll_cq and the device if the device reports an error.
    int poll(std::span<ibv_wc> out) {
        int n = ibv_poll_cq(cq_, static_cast<int>(out.size()), out.data());
        if (n < 0) [[unlikely]]
            throw_poll_error(n);
        return n;
    }

    /// Grows (or shrinks) the CQ to at least `entries` (ibv_resize_cq).
    void resize(int entries);

    /// Arms the CQ: the channel reports the next completion added to it.
    void request_notify(bool solicited_only = false);

    /// Acknowledges events taken with completion_channel::try_get_event.
    /// Every event must be acked before the CQ is destroyed.
    void ack_events(unsigned count) noexcept { ibv_ack_cq_events(cq_, count); }

private:
    completion_queue(std::shared_ptr<device_context> device, std::shared_ptr<completion_channel> channel)
        : device_(std::move(device)), channel_(std::move(channel)) {}
    [[noreturn]] void throw_poll_error(int rc) const;

    std::shared_ptr<device_context> device_;
    std::shared_ptr<completion_channel> channel_;
    ibv_cq* cq_ = nullptr;
};

}  // namespace cordma
