#include <cordma/listener.hpp>

#include <deque>
#include <list>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/task_group.hpp>
#include <cordma/detail/agent.hpp>
#include <cordma/detail/check.hpp>
#include <cordma/detail/listener_owned.hpp>
#include <cordma/detail/cm_id.hpp>
#include <cordma/detail/connect.hpp>
#include <cordma/detail/listen_state.hpp>

namespace cordma {

namespace detail {

namespace {

std::string peer_of(rdma_cm_id* id) {
    socket_address peer;
    const sockaddr* address = rdma_get_peer_addr(id);
    peer.length = address->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&peer.storage, address, peer.length);
    return peer.to_string();
}

}  // namespace

listen_state::listen_state(std::shared_ptr<detail::runtime> rt, connection_settings settings, const socket_address& where)
    : rt_(std::move(rt)), settings_(std::move(settings)) {
    on_event = &listen_state::dispatch;
    std::string wanted = where.to_string();
    errno = 0;
    detail::check_minus_one(rdma_create_id(rt_->listener->cm_channel(), &id_, static_cast<cm_target*>(this), RDMA_PS_TCP),
                            [&] { return "rdma_create_id(listen " + wanted + ")"; });
    try {
        detail::check_minus_one(rdma_bind_addr(id_, const_cast<sockaddr*>(where.get())),
                                [&] { return "rdma_bind_addr(" + wanted + ")"; });
        detail::check_minus_one(rdma_listen(id_, 128), [&] { return "rdma_listen(" + wanted + ", backlog=128)"; });
    } catch (...) {
        rdma_destroy_id(id_);
        throw;
    }
    socket_address local;
    const sockaddr* bound = rdma_get_local_addr(id_);
    local.length = bound->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&local.storage, bound, local.length);
    address_ = local.to_string();
}

listen_state::~listen_state() {
    shut();
    rdma_destroy_id(id_);
}

void listen_state::dispatch(cm_target* self, const cm_event_copy& event) noexcept {
    static_cast<listen_state*>(self)->on_cm_event(event);
}

void listen_state::on_cm_event(const cm_event_copy& event) noexcept {
    if (event.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        // A control QP completes a connection already accepted: take it even
        // after close(), or that client's connect would fail half-way.
        auto hello = cm_hello::from(event);
        if (hello && hello->kind == cm_hello::control)
            return accept_control(event.id, hello->token);
        if (closed_) {
            rdma_reject(event.id, nullptr, 0);
            rdma_destroy_id(event.id);
            return;
        }
        if (!waiters_.empty()) {
            auto waiter = waiters_.front();
            waiters_.pop_front();
            waiter->id = event.id;
            waiter->hello = hello;
            waiter->done = true;
            waiter->handle.resume();
            return;
        }
        pending_.push_back({event.id, hello});
        return;
    }
    if (event.id != id_) {
        // A client that went away before anyone accepted it.
        std::erase_if(pending_, [&](const connect_request& r) { return r.id == event.id; });
        rdma_destroy_id(event.id);
    }
}

void listen_state::shut() noexcept {
    if (closed_)
        return;
    closed_ = true;
    for (auto& request : pending_) {
        rdma_reject(request.id, nullptr, 0);
        rdma_destroy_id(request.id);
    }
    pending_.clear();
    while (!waiters_.empty()) {
        auto waiter = waiters_.front();
        waiters_.pop_front();
        waiter->done = true;
        waiter->handle.resume();
    }
}

void listen_state::accept_control(rdma_cm_id* id, std::uint64_t token) noexcept {
    auto it = awaiting_control_.find(token);
    std::shared_ptr<connection_state> state = it != awaiting_control_.end() ? it->second.lock() : nullptr;
    if (it != awaiting_control_.end())
        awaiting_control_.erase(it);
    if (!state || !state->agent) {
        // Not one of ours, or its connection is already gone.
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
        return;
    }
    auto handshake = [](std::shared_ptr<listen_state> st, std::shared_ptr<cm_id> cm,
                        std::shared_ptr<connection_state> state) -> task<void> {
        try {
            cm->create_qp(control_capacity);
            rdma_conn_param param = connection_parameters(*st->rt_, st->settings_);
            param.rnr_retry_count = 7;
            check_minus_one(rdma_accept(cm->id(), &param), [&] { return "rdma_accept(" + cm->peer() + ", agent)"; });
            auto event = co_await cm->next_event(st->settings_.connect_timeout);
            if (!event || event->type != RDMA_CM_EVENT_ESTABLISHED)
                throw std::runtime_error(event ? describe(*event) : std::string("timed out"));
            connection control = make_connection(st->rt_, st->settings_, control_capacity, std::move(cm));
            state->agent->attach(control, state);
        } catch (const std::exception& e) {
            state->agent->shut_down(std::string("the agent's control queue pair could not be accepted: ") + e.what());
        }
    };
    try {
        auto cm = cm_id::make(rt_, id, peer_of(id) + " (agent)");
        spawn_detached(handshake(self_.lock(), std::move(cm), state), [](std::exception_ptr) {});
    } catch (...) {
        rdma_reject(id, nullptr, 0);
    }
}

void listen_state::cancel(const std::shared_ptr<request_waiter>& waiter) noexcept {
    if (waiter->done)
        return;
    std::erase(waiters_, waiter);
    waiter->done = true;
    waiter->cancelled = true;
    waiter->handle.resume();
}

std::shared_ptr<listen_state> listen_state::make(std::shared_ptr<detail::runtime> rt, connection_settings settings,
                                                 const socket_address& where) {
    auto listener = rt->listener;
    auto st = owned_by_listener_thread(std::move(listener),
                                       new listen_state(std::move(rt), std::move(settings), where));
    st->self_ = st;
    return st;
}

}  // namespace detail

task<connection> listener::accept(std::stop_token token) { return impl_->accept(std::move(token)); }

void listener::close() { impl_->close(); }

const std::string& listener::address() const { return impl_->address(); }

namespace detail {

task<connection> listen_state::accept(std::stop_token token) {
    // Keep ourselves alive across the suspensions.
    std::shared_ptr<listen_state> st = self_.lock();
    co_await st->get_runtime()->listener->schedule();
    for (;;) {
        auto waiter = std::make_shared<detail::request_waiter>();
        std::optional<std::stop_callback<std::function<void()>>> on_stop;
        if (token.stop_possible())
            on_stop.emplace(token, [st, waiter] { st->get_runtime()->listener->post([st, waiter] { st->cancel(waiter); }); });
        co_await st->next_request(waiter);
        on_stop.reset();
        if (waiter->cancelled)
            throw operation_cancelled("accept", st->address());
        if (waiter->id == nullptr)
            throw disconnected_error("accept", st->address(), "the listener is closed");
        auto cm = cm_id::make(st->get_runtime(), waiter->id, peer_of(waiter->id));
        try {
            cm->create_qp(st->settings().capacity);
            rdma_conn_param param = connection_parameters(*st->get_runtime(), st->settings());
            check_minus_one(rdma_accept(cm->id(), &param), [&] { return "rdma_accept(" + cm->peer() + ")"; });
        } catch (...) {
            rdma_reject(cm->id(), nullptr, 0);
            throw;
        }
        auto event = co_await cm->next_event(st->settings().connect_timeout);
        if (event && event->type == RDMA_CM_EVENT_ESTABLISHED) {
            connection conn = make_connection(st->get_runtime(), st->settings(), st->settings().capacity, std::move(cm));
            if (waiter->hello) {
                // A cordma client: its agent's control QP follows.
                conn.state()->agent = std::make_shared<agent>(st->get_runtime()->pool, st->settings().agent, conn.peer());
                st->awaiting_control_[waiter->hello->token] = conn.state();
            }
            co_return conn;
        }
        // The client gave up mid-handshake: drop it, wait for the next.
    }
}

void listen_state::close() {
    auto st = self_.lock();
    rt_->listener->post([st] { st->shut(); });
}

}  // namespace detail

listener builder::listen(std::string_view address) {
    socket_address where = resolve(parse_address(address, 0, true), true);
    if (settings_.exchange == endpoint_exchange::tcp)
        return detail::listen_tcp(runtime(), settings_, where);
    return listener(std::shared_ptr<detail::acceptor>(detail::listen_state::make(runtime(), settings_, where)));
}

}  // namespace cordma
