#pragma once
/// One rdma_cm id and the coroutine, if any, waiting for its next event.
/// It carries no QP (cordma makes and drives its QPs itself, see
/// cm_handshake.hpp); once connected it watches the peer as the transport.
/// Event listener thread only, created and destroyed there.

#include <chrono>
#include <coroutine>
#include <memory>
#include <optional>
#include <string>

#include <rdma/rdma_cma.h>

#include <cordma/event_listener.hpp>
#include <cordma/queue_pair.hpp>
#include "engine/cm_target.hpp"
#include "engine/transport.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

struct runtime;

class cm_id : public cm_target, public transport {
public:
    /// A new id on the runtime listener's CM channel.
    cm_id(std::shared_ptr<runtime> rt, std::string peer);
    /// Takes over `id` (a connect request's new id).
    cm_id(std::shared_ptr<runtime> rt, rdma_cm_id* id, std::string peer);
    ~cm_id() override;

    rdma_cm_id* id() const noexcept { return id_; }
    const std::string& peer() const noexcept { return peer_; }
    void set_peer(std::string peer) { peer_ = std::move(peer); }

    /// Waits for the next event on this id, for at most `limit`; nullopt on
    /// timeout.
    auto next_event(std::chrono::milliseconds limit) {
        struct awaiter {
            cm_id* self;
            std::chrono::milliseconds limit;
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> h) { self->wait(h, limit); }
            std::optional<cm_event_copy> await_resume() { return std::exchange(self->event_, std::nullopt); }
        };
        return awaiter{this, limit};
    }

    task<void> close() override;
    void attach(std::weak_ptr<connection_state> state) override { state_ = std::move(state); }

    /// A cm_id shared_ptr whose deleter destroys it on the event listener thread,
    /// where its events are dispatched.
    static std::shared_ptr<cm_id> make(std::shared_ptr<runtime> rt, rdma_cm_id* id, std::string peer);

private:
    static void dispatch(cm_target* self, const cm_event_copy& event) noexcept;
    void handle_event(const cm_event_copy& event) noexcept;
    void wait(std::coroutine_handle<> h, std::chrono::milliseconds limit);

    std::shared_ptr<runtime> rt_;
    rdma_cm_id* id_ = nullptr;
    std::string peer_;
    std::weak_ptr<connection_state> state_;
    std::coroutine_handle<> waiter_;
    std::optional<cm_event_copy> event_;
    /// Bounds the waits; kept from one wait to the next while they end at
    /// the same time (a handshake's steps share one deadline), so a
    /// handshake arms one timer rather than one per step.
    std::shared_ptr<event_listener::timer> timer_;
    std::chrono::steady_clock::time_point timer_due_;
    bool disconnected_ = false;
};

/// "RDMA_CM_EVENT_REJECTED (status 28)" and friends, for messages.
std::string describe(const cm_event_copy& event);

}  // namespace cordma::detail
