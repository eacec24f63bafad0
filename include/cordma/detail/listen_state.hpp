#pragma once
/// A listening rdma_cm id: connect requests wait here until an accept takes
/// them. Listener thread only; destroyed there.

#include <coroutine>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <string>

#include <rdma/rdma_cma.h>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/detail/acceptor.hpp>
#include <cordma/detail/cm_hello.hpp>
#include <cordma/detail/cm_target.hpp>
#include <cordma/detail/runtime.hpp>

namespace cordma::detail {

class connection_state;

struct connect_request {
    rdma_cm_id* id = nullptr;
    std::optional<cm_hello> hello;
};

struct request_waiter {
    std::coroutine_handle<> handle;
    rdma_cm_id* id = nullptr;
    std::optional<cm_hello> hello;
    bool done = false;
    bool cancelled = false;
};

class listen_state : public cm_target, public acceptor {
public:
    static std::shared_ptr<listen_state> make(std::shared_ptr<detail::runtime> rt, connection_settings settings,
                                              const socket_address& where);
    ~listen_state() override;

    const std::shared_ptr<detail::runtime>& get_runtime() const noexcept { return rt_; }
    const connection_settings& settings() const noexcept { return settings_; }
    const std::string& address() const noexcept override { return address_; }
    task<connection> accept(std::stop_token token) override;
    void close() override;

    /// Waits for the next connect request (or close, or cancel).
    auto next_request(std::shared_ptr<request_waiter> waiter) {
        struct awaiter {
            listen_state* self;
            std::shared_ptr<request_waiter> waiter;
            bool await_ready() {
                if (self->closed_) {
                    waiter->done = true;
                    return true;
                }
                if (self->pending_.empty())
                    return false;
                waiter->id = self->pending_.front().id;
                waiter->hello = self->pending_.front().hello;
                self->pending_.pop_front();
                waiter->done = true;
                return true;
            }
            void await_suspend(std::coroutine_handle<> h) {
                waiter->handle = h;
                self->waiters_.push_back(waiter);
            }
            void await_resume() const noexcept {}
        };
        return awaiter{this, std::move(waiter)};
    }

    void shut() noexcept;
    void cancel(const std::shared_ptr<request_waiter>& waiter) noexcept;

private:
    listen_state(std::shared_ptr<detail::runtime> rt, connection_settings settings, const socket_address& where);
    static void dispatch(cm_target* self, const cm_event_copy& event) noexcept;
    void on_cm_event(const cm_event_copy& event) noexcept;
    void accept_control(rdma_cm_id* id, std::uint64_t token) noexcept;

    std::shared_ptr<detail::runtime> rt_;
    connection_settings settings_;
    rdma_cm_id* id_ = nullptr;
    std::string address_;
    std::deque<connect_request> pending_;
    // Accepted connections whose agent's control QP has yet to arrive.
    std::map<std::uint64_t, std::weak_ptr<connection_state>> awaiting_control_;
    std::deque<std::shared_ptr<request_waiter>> waiters_;
    bool closed_ = false;
    std::weak_ptr<listen_state> self_;
};

}  // namespace cordma::detail
