#include <cordma/detail/cm_id.hpp>

#include <system_error>

#include <cordma/detail/check.hpp>
#include <cordma/detail/listener_owned.hpp>
#include <cordma/detail/connection_state.hpp>
#include <cordma/detail/runtime.hpp>

namespace cordma::detail {

std::string describe(const cm_event_copy& event) {
    return std::string(rdma_event_str(event.type)) + " (status " + std::to_string(event.status) + ")";
}

cm_id::cm_id(std::shared_ptr<runtime> rt, std::string peer) : rt_(std::move(rt)), peer_(std::move(peer)) {
    cm_target::on_event = &cm_id::dispatch;
    errno = 0;
    detail::check_minus_one(rdma_create_id(rt_->listener->cm_channel(), &id_, static_cast<cm_target*>(this), RDMA_PS_TCP),
                            [&] { return "rdma_create_id(peer=" + peer_ + ")"; });
}

cm_id::cm_id(std::shared_ptr<runtime> rt, rdma_cm_id* id, std::string peer)
    : rt_(std::move(rt)), id_(id), peer_(std::move(peer)) {
    cm_target::on_event = &cm_id::dispatch;
    id_->context = static_cast<cm_target*>(this);
}

cm_id::~cm_id() {
    if (timer_)
        timer_->cancel();
    if (reserved_)
        rt_->release(capacity_);
    if (id_ != nullptr) {
        if (owns_qp_ && id_->qp != nullptr)
            rdma_destroy_qp(id_);
        // Otherwise the QP belongs to the connection state (destroyed with
        // it); the id must not touch it.
        id_->qp = nullptr;
        rdma_destroy_id(id_);
    }
}

void cm_id::create_qp(const qp_capacity& capacity) {
    if (id_->verbs != rt_->listener->device()->native_handle())
        throw std::system_error(std::make_error_code(std::errc::address_not_available),
                                "connection with " + peer_ + ": the address is on device " +
                                    ibv_get_device_name(id_->verbs->device) + ", but the builder uses " +
                                    rt_->listener->device()->name() + "; set builder::device");
    rt_->reserve(capacity);
    reserved_ = true;
    capacity_ = capacity;
    ibv_qp_init_attr init = queue_pair::rc_attributes(*rt_->send_cq, *rt_->recv_cq, capacity);
    errno = 0;
    detail::check_minus_one(rdma_create_qp(id_, rt_->pd->native_handle(), &init), [&] {
        return "rdma_create_qp(peer=" + peer_ + ", max_send_wr=" + std::to_string(capacity.max_send_wr) +
               ", max_recv_wr=" + std::to_string(capacity.max_recv_wr) + ")";
    });
    owns_qp_ = true;
}

std::shared_ptr<cm_id> cm_id::make(std::shared_ptr<runtime> rt, rdma_cm_id* id, std::string peer) {
    auto listener = rt->listener;
    cm_id* raw = id != nullptr ? new cm_id(std::move(rt), id, std::move(peer)) : new cm_id(std::move(rt), std::move(peer));
    return owned_by_listener_thread(std::move(listener), raw);
}

void cm_id::dispatch(cm_target* self, const cm_event_copy& event) noexcept {
    static_cast<cm_id*>(self)->handle_event(event);
}

void cm_id::wait(std::coroutine_handle<> h, std::chrono::milliseconds limit) {
    waiter_ = h;
    timer_ = rt_->listener->call_after(limit, [this] {
        timer_.reset();
        if (auto h = std::exchange(waiter_, nullptr))
            h.resume();  // with no event: timed out
    });
}

void cm_id::handle_event(const cm_event_copy& event) noexcept {
    if (auto h = std::exchange(waiter_, nullptr)) {
        if (timer_)
            std::exchange(timer_, nullptr)->cancel();
        event_ = event;
        h.resume();
        return;
    }
    // Nobody is waiting: the connection is up, and this is the peer (or the
    // device) going away.
    switch (event.type) {
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_ADDR_CHANGE:
        if (!disconnected_) {
            disconnected_ = true;
            // Answer the peer's disconnect request (DREP); without it the
            // peer's close() waits for the CM's own timeout.
            rdma_disconnect(id_);
            if (auto state = state_.lock())
                state->shut_down("peer " + peer_ + " disconnected (" + describe(event) + ")");
        }
        break;
    default: break;
    }
}

task<void> cm_id::close() {
    if (disconnected_)
        co_return;
    disconnected_ = true;
    if (rdma_disconnect(id_) != 0)
        co_return;  // never connected, or already gone: nothing to tell the peer
    // The local side gets DISCONNECTED too once the peer has answered (or the
    // CM gave up on it); bound the wait so a dead peer cannot hold us.
    for (;;) {
        auto event = co_await next_event(std::chrono::milliseconds(5000));
        if (!event || event->type == RDMA_CM_EVENT_DISCONNECTED || event->type == RDMA_CM_EVENT_TIMEWAIT_EXIT)
            co_return;
    }
}

}  // namespace cordma::detail
