#include "connect/rdma_cm/cm_acceptor.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include <cordma/task_group.hpp>

#include "connect/assemble.hpp"
#include "connect/backlog_refusal.hpp"
#include "connect/qp_settings.hpp"
#include "connect/rdma_cm/cm_handshake.hpp"
#include "engine/connection_state.hpp"
#include "engine/event_listener_access.hpp"
#include "engine/event_listener_owned.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace {

void reject(rdma_cm_id* id) noexcept {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
}

}  // namespace

cm_acceptor::cm_acceptor(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where)
    : rt_(std::move(rt)), settings_(std::move(settings)), ready_(waiter_queue<connection>::make(rt_->event_listener)) {
    on_event = &cm_acceptor::dispatch;
    std::string wanted = where.to_string();
    check_minus_one(rdma_create_id(detail::event_listener_access::cm_channel(*rt_->event_listener), &id_, static_cast<cm_target*>(this), RDMA_PS_TCP),
                    [&] { return "rdma_create_id(listen " + wanted + ")"; });
    try {
        check_minus_one(rdma_bind_addr(id_, const_cast<sockaddr*>(where.get())),
                        [&] { return "rdma_bind_addr(" + wanted + ")"; });
        // A specific address is bound to its device and port now: check the
        // settings against them here, so a bad one fails listen(), not every
        // accept. (A wildcard address is checked per client.)
        if (id_->verbs != nullptr) {
            if (id_->verbs != rt_->event_listener->device()->native_handle())
                throw std::system_error(std::make_error_code(std::errc::address_not_available),
                                        "listen on " + wanted + ": the address is on device " +
                                            ibv_get_device_name(id_->verbs->device) + ", but the builder uses " +
                                            rt_->event_listener->device()->name() + "; set builder::device");
            qp_options(settings_, *rt_->event_listener->device(), rdma_get_local_addr(id_), id_->port_num, qp_role::data);
        }
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

cm_acceptor::~cm_acceptor() {
    shut();
    rdma_destroy_id(id_);
}

std::shared_ptr<cm_acceptor> cm_acceptor::make(std::shared_ptr<runtime> rt, connection_settings settings,
                                               const socket_address& where) {
    auto el = rt->event_listener;
    auto self = owned_by_event_listener_thread(std::move(el), new cm_acceptor(std::move(rt), std::move(settings), where));
    // Before the first connect request can come: handshakes are started
    // through it (schedule_starts), and one that came before it was set
    // would wait forever.
    self->self_ = self;
    // The kernel's backlog counts connect requests this process has not
    // read yet; they are read at once, and held against settings.backlog
    // here.
    check_minus_one(rdma_listen(self->id_, 1024),
                    [&] { return "rdma_listen(" + where.to_string() + ", backlog=1024)"; });
    return self;
}

void cm_acceptor::dispatch(cm_target* self, const cm_event_copy& event) noexcept {
    static_cast<cm_acceptor*>(self)->on_cm_event(event);
}

void cm_acceptor::on_cm_event(const cm_event_copy& event) noexcept {
    if (event.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        // A control QP completes a connection already accepted: take it even
        // after close(), or that client's connect would fail half-way.
        auto hello = cm_hello::from(event);
        if (hello && hello->kind == cm_hello::control)
            return accept_control(event.id, *hello);
        // Both ends must agree on the agent: refuse a mismatch now, saying
        // why, rather than leave a client waiting for a control QP (or a
        // reply) that never comes.
        if (settings_.with_agent && !hello)
            return refuse_client(event.id, cm_refusal::listener_with_agent,
                                 "its connect request carries no cordma hello (a plain rdma_cm client, or cordma "
                                 "with builder::agent(false)), and this listener has the agent on; listen with "
                                 "builder::agent(false) to accept plain clients");
        if (!settings_.with_agent && hello)
            return refuse_client(event.id, cm_refusal::listener_without_agent,
                                 "it is a cordma client with the agent on, and this listener has "
                                 "builder::agent(false); connect with builder::agent(false)");
        if (ready_->closed())
            return reject(event.id);
        if (held() >= settings_.backlog)
            return refuse_full(event.id);
        if (refused_full_ > 0) {
            detail::logf(log_level::warning,
                         "cordma: listener %s: its backlog has room again, after refusing %zu client(s) while full",
                         address_.c_str(), refused_full_);
            refused_full_ = 0;
        }
        connect_request request{event.id, hello, {}};
        if (!hello)
            request.private_data = private_data_of(event);
        return admit(std::move(request));
    }
    if (event.id != id_) {
        // A client that went away while waiting for its handshake.
        std::erase_if(waiting_, [&](const connect_request& r) { return r.id == event.id; });
        std::erase_if(early_control_, [&](const auto& entry) {
            if (entry.second.id != event.id)
                return false;
            entry.second.expiry->cancel();
            return true;
        });
        rdma_destroy_id(event.id);
    }
}

void cm_acceptor::refuse_client(rdma_cm_id* id, cm_refusal::reason_type reason, const char* why) noexcept {
    std::string peer = peer_of(id);
    detail::logf(log_level::warning, "cordma: listener %s: refused a client from %s: %s", address_.c_str(),
                 peer.c_str(), why);
    refuse(id, reason);
    rdma_destroy_id(id);
}

void cm_acceptor::refuse_full(rdma_cm_id* id) noexcept {
    if (refused_full_++ == 0)
        detail::logf(log_level::warning,
                     "cordma: listener %s: refused a client from %s: its backlog of %zu is full (%zu handshaking, "
                     "%zu waiting to, %zu connected and waiting for accept()); it retries until its "
                     "connect_timeout. Raise builder::backlog, or accept() sooner",
                     address_.c_str(), peer_of(id).c_str(), settings_.backlog, handshakes_, waiting_.size(),
                     ready_->ready());
    cm_refusal refusal;
    refusal.reason = cm_refusal::backlog_full;
    refusal.backlog = backlog_on_wire(settings_.backlog);
    auto bytes = refusal.bytes();
    rdma_reject(id, bytes.data(), static_cast<std::uint8_t>(bytes.size()));
    rdma_destroy_id(id);
}

void cm_acceptor::shut() noexcept {
    for (auto& conn : ready_->close())
        conn.shut_down();
    for (auto& request : std::exchange(waiting_, {}))
        reject(request.id);
    for (auto& [token, early] : std::exchange(early_control_, {})) {
        early.expiry->cancel();
        reject(early.id);
    }
}

void cm_acceptor::expire_early_control(std::uint64_t token) noexcept {
    auto it = early_control_.find(token);
    if (it == early_control_.end())
        return;
    rdma_cm_id* id = it->second.id;
    early_control_.erase(it);
    detail::logf(log_level::warning,
                 "cordma: listener %s: refused an agent control queue pair from %s: its token matches no "
                 "connection waiting for one (none completed its handshake here within connect_timeout)",
                 address_.c_str(), peer_of(id).c_str());
    reject(id);
}

void cm_acceptor::accept_control(rdma_cm_id* id, const cm_hello& hello) noexcept {
    auto it = awaiting_control_.find(hello.token);
    if (it == awaiting_control_.end() && !early_control_.contains(hello.token)) {
        // Its data QP's handshake may not have ended here yet: wait for it
        // (handshake() takes this request up), within connect_timeout.
        try {
            std::weak_ptr<cm_acceptor> weak = self_;
            std::uint64_t token = hello.token;
            auto expiry = rt_->event_listener->call_after(settings_.connect_timeout, [weak, token] {
                if (auto self = weak.lock())
                    self->expire_early_control(token);
            });
            early_control_.emplace(hello.token, early_control{id, hello, std::move(expiry)});
            return;
        } catch (...) {
            // No memory for a timer: refuse it now, as below.
        }
    }
    std::shared_ptr<connection_state> state = it != awaiting_control_.end() ? it->second.lock() : nullptr;
    if (it != awaiting_control_.end())
        awaiting_control_.erase(it);
    if (!state || !state->agent) {
        // Not one of ours (a forged or stale token), or its connection is
        // already gone.
        detail::logf(log_level::warning,
                     "cordma: listener %s: refused an agent control queue pair from %s: its token matches no "
                     "connection waiting for one",
                     address_.c_str(), peer_of(id).c_str());
        return reject(id);
    }
    auto handshake = [](std::shared_ptr<cm_acceptor> self, std::shared_ptr<cm_id> cm, cm_hello hello,
                        connection conn) -> task<void> {
        std::string failure;
        try {
            auto qp = co_await cm_accept_qp(self->rt_, self->settings_, cm, qp_role::control, hello);
            attach_control(conn, std::move(qp), std::move(cm));
        } catch (const std::exception& e) {
            failure = e.what();
        }
        if (!failure.empty())
            fail_control(conn, "the agent's control queue pair could not be accepted: " + failure);
    };
    try {
        auto cm = cm_id::make(rt_, id, peer_of(id) + " (agent)");
        spawn_detached(handshake(self_.lock(), std::move(cm), hello, connection_access::make(std::move(state))),
                       [](std::exception_ptr) {});
    } catch (...) {
        rdma_reject(id, nullptr, 0);
    }
}

task<connection> cm_acceptor::accept(std::stop_token token) {
    std::shared_ptr<cm_acceptor> self = self_.lock();  // alive across the suspensions
    // Only to get onto the event listener: a server accepting in a loop
    // there (rpc, stream) takes every connection already waiting at once,
    // not one per turn of the loop, which in a storm of connect requests
    // left connections waiting seconds for their accept().
    if (!rt_->event_listener->running_in_this_thread())
        co_await rt_->event_listener->schedule();
    std::optional<connection> conn = co_await ready_->pop(token, "accept", address_);
    if (!conn)
        throw disconnected_error("accept", address_, "the listener is closed");
    co_return std::move(*conn);
}

void cm_acceptor::admit(connect_request request) noexcept {
    try {
        waiting_.push_back(std::move(request));
    } catch (...) {
        return reject(request.id);  // no memory to hold it
    }
    schedule_starts();
}

void cm_acceptor::schedule_starts() noexcept {
    if (start_asked_ || waiting_.empty() || handshakes_ >= max_handshakes || ready_->closed())
        return;
    try {
        std::weak_ptr<cm_acceptor> weak = self_;
        rt_->event_listener->post([weak] {
            if (auto self = weak.lock())
                self->start_waiting();
        });
        start_asked_ = true;
    } catch (...) {
        // No memory to post: the next request or handshake's end asks again.
    }
}

void cm_acceptor::start_waiting() noexcept {
    start_asked_ = false;
    for (std::size_t n = 0; n < handshakes_per_turn && handshakes_ < max_handshakes && !waiting_.empty() &&
                            !ready_->closed();
         ++n) {
        connect_request next = std::move(waiting_.front());
        waiting_.pop_front();
        ++handshakes_;
        // Each client's handshake runs on its own: one that stalls (it never
        // answers the accept) holds up nobody else for its connect_timeout.
        try {
            spawn_detached(handshake(self_.lock(), std::move(next)), [](std::exception_ptr) {});
        } catch (...) {
            // No memory for the coroutine: the request went with it,
            // unanswered; the client's connect times out.
            --handshakes_;
        }
    }
    schedule_starts();
}

void cm_acceptor::handshake_ended() noexcept {
    --handshakes_;
    schedule_starts();
}

// The first parameter keeps the acceptor alive until the handshake ends.
task<void> cm_acceptor::handshake(std::shared_ptr<cm_acceptor>, connect_request request) {
    std::string failure;
    try {
        auto cm = cm_id::make(rt_, request.id, peer_of(request.id));
        auto qp = co_await cm_accept_qp(rt_, settings_, cm, qp_role::data, request.hello);
        // The listener closed while this client was answering: make
        // nothing more for it (no agent, no pool memory, which could hold
        // a chunk registered after the application has moved on); its QP
        // and cm id go, and the client sees the disconnect.
        if (ready_->closed()) {
            handshake_ended();
            co_return;
        }
        std::string peer = cm->peer();
        connection conn = assemble([&] {
            auto parts = parts_for(*rt_, settings_, std::move(qp), std::move(peer), std::move(cm),
                                   request.hello.has_value());
            parts.peer_private_data = std::move(request.private_data);
            return parts;
        }());
        if (request.hello) {  // a cordma client: its agent's control QP follows
            // Forget the clients that left without ever sending theirs,
            // or the map grows with every one of them.
            std::erase_if(awaiting_control_, [](const auto& entry) { return entry.second.expired(); });
            awaiting_control_[request.hello->token] = connection_access::state(conn);
            // Its control request may have come first: take it up now.
            if (auto early = early_control_.find(request.hello->token); early != early_control_.end()) {
                early_control parked = std::move(early->second);
                early_control_.erase(early);
                parked.expiry->cancel();
                accept_control(parked.id, parked.hello);
            }
        }
        if (auto refused = ready_->push(std::move(conn)))
            refused->shut_down();  // the listener closed meanwhile
    } catch (const std::exception& e) {
        failure = e.what();
    }
    // One client that could not be set up (gave up mid-handshake, could
    // not agree on the path) is dropped; the listener goes on.
    if (!failure.empty())
        detail::logf(log_level::warning, "cordma: listener %s: dropped a client: %s", address_.c_str(),
                     failure.c_str());
    handshake_ended();
}

void cm_acceptor::close() {
    auto self = self_.lock();
    rt_->event_listener->post([self] { self->shut(); });
}

listener listen_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where) {
    return listener_access::make(cm_acceptor::make(std::move(rt), std::move(settings), where));
}

}  // namespace cordma::detail
