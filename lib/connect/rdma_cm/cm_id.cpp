#include "connect/rdma_cm/cm_id.hpp"

#include <system_error>

#include "log/logf.hpp"

#include "verbs/check.hpp"
#include "engine/event_listener_access.hpp"
#include "engine/event_listener_owned.hpp"
#include "engine/connection_state.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

namespace {

/// Whether the port under `id` is down now (its link is, say).
bool port_down(rdma_cm_id* id) noexcept {
    if (id == nullptr || id->verbs == nullptr || id->port_num == 0)
        return false;
    ibv_port_attr attr{};
    return ibv_query_port(id->verbs, id->port_num, &attr) == 0 && attr.state != IBV_PORT_ACTIVE;
}

constexpr std::chrono::milliseconds port_poll{250};
constexpr std::chrono::minutes port_wait_limit{5};

/// Destroys `id` once its port is up again. Destroying a connected id
/// sends a disconnect request, and Soft-RoCE (Linux 6.1, measured in the
/// faults suite's linkdown) wedges the port's connection manager for good
/// when a CM message is sent while the port is down: after the link came
/// back, no rdma_cm connection to or from that host was made again (not
/// even rdma-core's ucmatose). So an id whose connection ended while its
/// link was down is kept until the port is active again, for at most
/// port_wait_limit; events for it are dropped meanwhile. If the event
/// listener stops first, the id is destroyed with its pending timers.
void destroy_when_port_up(std::shared_ptr<event_listener> el, std::shared_ptr<rdma_cm_id> id,
                          std::chrono::steady_clock::time_point give_up) {
    if (!port_down(id.get()) || std::chrono::steady_clock::now() >= give_up)
        return;  // the last reference: destroyed here
    auto* raw = el.get();
    raw->call_after(port_poll, [el = std::move(el), id = std::move(id), give_up]() mutable {
        destroy_when_port_up(std::move(el), std::move(id), give_up);
    });
}

}  // namespace

std::string describe(const cm_event_copy& event) {
    return std::string(rdma_event_str(event.type)) + " (status " + std::to_string(event.status) + ")";
}

cm_id::cm_id(std::shared_ptr<runtime> rt, std::string peer) : rt_(std::move(rt)), peer_(std::move(peer)) {
    cm_target::on_event = &cm_id::dispatch;
    errno = 0;
    detail::check_minus_one(rdma_create_id(detail::event_listener_access::cm_channel(*rt_->event_listener), &id_, static_cast<cm_target*>(this), RDMA_PS_TCP),
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
    if (id_ == nullptr)
        return;
    if (port_down(id_)) {
        detail::logf(log_level::info,
                     "cordma: connection with %s: its port is down; its rdma_cm id is kept until the port is up "
                     "again (a disconnect sent now would wedge Soft-RoCE's connection manager)",
                     peer_.c_str());
        id_->context = nullptr;  // its events, if any, are dropped
        try {
            destroy_when_port_up(rt_->event_listener, std::shared_ptr<rdma_cm_id>(id_, ::rdma_destroy_id),
                                 std::chrono::steady_clock::now() + port_wait_limit);
            return;
        } catch (...) {
            // No memory for the timer: destroyed by the shared_ptr above.
            return;
        }
    }
    rdma_destroy_id(id_);
}

std::shared_ptr<cm_id> cm_id::make(std::shared_ptr<runtime> rt, rdma_cm_id* id, std::string peer) {
    auto el = rt->event_listener;
    cm_id* raw = id != nullptr ? new cm_id(std::move(rt), id, std::move(peer)) : new cm_id(std::move(rt), std::move(peer));
    return owned_by_event_listener_thread(std::move(el), raw);
}

void cm_id::dispatch(cm_target* self, const cm_event_copy& event) noexcept {
    static_cast<cm_id*>(self)->handle_event(event);
}

void cm_id::wait(std::coroutine_handle<> h, std::chrono::milliseconds limit) {
    auto due = std::chrono::steady_clock::now() + limit;
    // The timer already armed does if it ends within 2 ms of this wait's
    // end (a deadline's remainder, rounded to milliseconds, each step).
    if (timer_ && (timer_due_ > due ? timer_due_ - due : due - timer_due_) > std::chrono::milliseconds(2))
        std::exchange(timer_, nullptr)->cancel();
    if (!timer_) {
        timer_ = rt_->event_listener->call_after(limit, [this] {
            timer_.reset();
            if (auto h = std::exchange(waiter_, nullptr))
                h.resume();  // with no event: timed out
        });
        timer_due_ = due;
    }
    waiter_ = h;
}

void cm_id::handle_event(const cm_event_copy& event) noexcept {
    if (auto h = std::exchange(waiter_, nullptr)) {
        // The timer stays for the next wait (~cm_id cancels it).
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
            // peer's close() waits for the CM's own timeout. Not while the
            // port is down (see ~cm_id).
            if (!port_down(id_))
                rdma_disconnect(id_);
            if (auto state = state_.lock())
                state->shut_down("peer " + peer_ + " disconnected (" + describe(event) + ")",
                                 disconnect_cause::peer_closed);
        }
        break;
    default: break;
    }
}

task<void> cm_id::close() {
    if (disconnected_)
        co_return;
    disconnected_ = true;
    if (port_down(id_))
        co_return;  // nothing can reach the peer; ~cm_id waits for the port
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
