#include <cordma/completion_queue.hpp>

#include <fcntl.h>

#include "verbs/check.hpp"

namespace cordma {

std::shared_ptr<completion_channel> completion_channel::create(std::shared_ptr<device_context> device) {
    errno = 0;
    ibv_comp_channel* channel = detail::check_pointer(ibv_create_comp_channel(device->native_handle()), [&] {
        return "ibv_create_comp_channel(device=" + device->name() + ")";
    });
    int flags = fcntl(channel->fd, F_GETFL);
    if (flags == -1 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) == -1) {
        int saved = errno;
        ibv_destroy_comp_channel(channel);
        detail::throw_verbs_error(saved, "fcntl(completion channel fd, O_NONBLOCK)");
    }
    return std::shared_ptr<completion_channel>(new completion_channel(std::move(device), channel));
}

completion_channel::~completion_channel() { ibv_destroy_comp_channel(channel_); }

completion_queue* completion_channel::try_get_event() {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(channel_, &cq, &context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return nullptr;
        detail::throw_verbs_error(errno, "ibv_get_cq_event(fd=" + std::to_string(fd()) + ")");
    }
    return static_cast<completion_queue*>(context);
}

std::shared_ptr<completion_queue> completion_queue::create(std::shared_ptr<device_context> device, int entries,
                                                           std::shared_ptr<completion_channel> channel) {
    std::shared_ptr<completion_queue> cq(new completion_queue(device, channel));
    errno = 0;
    cq->cq_ = detail::check_pointer(
        ibv_create_cq(device->native_handle(), entries, cq.get(), channel ? channel->native_handle() : nullptr, 0),
        [&] { return "ibv_create_cq(device=" + device->name() + ", entries=" + std::to_string(entries) + ")"; });
    return cq;
}

completion_queue::~completion_queue() {
    if (cq_ != nullptr)
        ibv_destroy_cq(cq_);
}

void completion_queue::resize(int entries) {
    detail::check_errno_return(ibv_resize_cq(cq_, entries), [&] {
        return "ibv_resize_cq(device=" + device_->name() + ", entries=" + std::to_string(entries) + ")";
    });
}

void completion_queue::request_notify(bool solicited_only) {
    detail::check_errno_return(ibv_req_notify_cq(cq_, solicited_only ? 1 : 0), [&] {
        return "ibv_req_notify_cq(device=" + device_->name() + ")";
    });
}

void completion_queue::throw_poll_error(int rc) const {
    detail::throw_verbs_error(-rc > 0 ? -rc : EIO, "ibv_poll_cq(device=" + device_->name() + ")");
}

}  // namespace cordma
