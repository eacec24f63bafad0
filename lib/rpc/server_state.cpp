// cordma::rpc::server's clients: checking the options, admitting the
// connections a listener accepts (or refusing them), the loops over the
// shared receive queue or each client's own, dropping a client, serving
// until stopped and shutting down. One call's life is in server_calls.cpp.
#include "rpc/server_state.hpp"

#include <limits>

#include "connect/qp_settings.hpp"
#include "engine/event_listener_access.hpp"

namespace cordma::rpc::detail {

namespace {

void check_options(const server_options& o) {
    auto bad = [](const std::string& what) {
        throw std::invalid_argument("cordma::rpc::server: server_options::" + what);
    };
    if (o.eager_size < 64 || o.eager_size > (std::size_t(1) << 20))
        bad("eager_size = " + std::to_string(o.eager_size) + " is out of range (64 B to 1 MiB)");
    if (o.credits < 1 || o.credits > 1024)
        bad("credits = " + std::to_string(o.credits) + " is out of range (1 to 1024)");
    if (o.receives < o.credits)
        bad("receives = " + std::to_string(o.receives) + " is below credits (" + std::to_string(o.credits) +
            "): one client could not have its calls in flight");
    if (o.max_request == 0)
        bad("max_request = 0: no request could be accepted");
}

}  // namespace

server_state::server_state(builder& b, server_options options)
    : builder_(b), options_(std::move(options)), event_listener_(b.event_listener()), pd_(b.pd()), buffers_(b.pool()) {
    check_options(options_);
    turn_tick_ = cordma::detail::event_listener_access::turn_tick(*event_listener_);
    turn_ms_ = cordma::detail::event_listener_access::turn_ms(*event_listener_);
    pending_source_.emplace(event_listener_, &server_state::collect_pending, this);
    bool srq = options_.shared_receives && cordma::shared_receive_queue::supported(b);
    if (options_.shared_receives && !srq)
        cordma::detail::logf(log_level::warning,
                             "cordma::rpc::server: device %s has no shared receive queues: each client gets its own "
                             "%u receives of %zu bytes instead",
                             b.event_listener()->device()->name().c_str(), options_.credits,
                             options_.eager_size + wire::header_size);
    if (srq)
        srq_ = cordma::shared_receive_queue(b, options_.receives, options_.eager_size + wire::header_size);
    budget_ = srq ? options_.receives : std::numeric_limits<std::uint64_t>::max();
    heartbeat_memory_ = std::make_unique<std::byte[]>(8);
    heartbeat_ = register_local_mr(pd_, heartbeat_memory_.get(), 8, access_flags::remote_read);

    // The hello every client gets in the accept: its credits, the largest
    // inline request, the largest request, the heartbeat word.
    wire::header hello;
    hello.type = wire::frame::hello;
    hello.credits = options_.credits;
    // Credits always come in a credit frame: after the client's receives
    // are posted (without the SRQ), or out of the budget its clients share
    // (with it), which may have none free at the moment.
    hello.code = wire::version | ((wire::hello_deferred_credits | wire::hello_traces) << 16);
    hello.size = options_.eager_size;
    hello.addr = options_.max_request;
    hello.id = reinterpret_cast<std::uint64_t>(heartbeat_.data());
    hello.rkey = heartbeat_.rkey();
    std::array<std::byte, wire::header_size> bytes{};
    wire::encode(hello, bytes);
    b.agent(false);
    b.private_data(std::span<const std::byte>(bytes));
    b.shared_receives(srq_);
    // A client whose request finds no receive posted (without the SRQ, or
    // a client of another server on this builder) retries after this
    // rather than 655 ms.
    if (b.settings().min_rnr_timer == 0)
        b.min_rnr_timer(12);
    // The server's first frame to a client, its credits, may reach it
    // before the client has posted its receives (rdma_cm sends the
    // client's RTU before the client sees the connection established):
    // its receiver-not-ready NAKs are retried until it has, which a client
    // does at once (it posts room for every frame the server may send).
    // A client that is gone is found by the transport's retries and the
    // connection's events, never by these.
    cordma::detail::wait_for_receivers(b);
    builder_ = b;
}

void server_state::handle(std::uint32_t method, std::string name, handler h) {
    if (!h)
        throw std::invalid_argument("cordma::rpc::server::handle(" + std::to_string(method) + ", \"" + name +
                                    "\"): the handler is empty");
    add_handler(method, handler_entry{std::move(name), std::move(h), {}}, "handle");
}

void server_state::handle_into(std::uint32_t method, std::string name, reply_handler h) {
    if (!h)
        throw std::invalid_argument("cordma::rpc::server::handle_into(" + std::to_string(method) + ", \"" + name +
                                    "\"): the handler is empty");
    add_handler(method, handler_entry{std::move(name), {}, std::move(h)}, "handle_into");
}

void server_state::add_handler(std::uint32_t method, handler_entry e, const char* call) {
    cordma::detail::run_and_wait(*event_listener_, [&] {
        auto [it, added] = handlers_.try_emplace(method, std::move(e));
        if (!added)
            throw std::invalid_argument(std::string("cordma::rpc::server::") + call + "(" + std::to_string(method) +
                                        "): the method is registered already, as \"" + it->second.name + "\"");
        view_->add(method, false, it->second.name, it->second.counts);
    });
}

void server_state::handle_any(std::string name, handler h) {
    if (!h)
        throw std::invalid_argument("cordma::rpc::server::handle_any(\"" + name + "\"): the handler is empty");
    cordma::detail::run_and_wait(*event_listener_, [&] {
        if (any_)
            throw std::invalid_argument("cordma::rpc::server::handle_any: registered already, as \"" + any_->name +
                                        "\"");
        any_.emplace(handler_entry{std::move(name), std::move(h), {}});
        view_->add(0, true, any_->name, any_->counts);
    });
}

void server_state::start_loops() {
    if (loops_started_ || !srq_)
        return;
    loops_started_ = true;
    auto log = [](std::exception_ptr e) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            cordma::detail::logf(log_level::error, "cordma::rpc::server: %s", x.what());
        }
    };
    spawn_detached(dispatch_loop(), log);
    spawn_detached(ended_loop(), log);
}

task<void> server_state::dispatch_loop() {
    auto self = shared_from_this();
    for (;;) {
        received_message m;
        bool stop = false;
        try {
            m = co_await srq_.next();
        } catch (...) {
            stop = true;  // the queue was destroyed: the server is going
        }
        if (stop || shut_)
            co_return;
        auto it = sessions_.find(m.qp_num());
        if (it != sessions_.end()) {
            on_frame(it->second, std::move(m));
            continue;
        }
        if (dropped_.contains(m.qp_num()))
            continue;
        auto& early = early_[m.qp_num()];
        if (early.size() <= options_.credits)
            early.push_back(std::move(m));  // else a client over its credits, before it was even accepted: dropped
    }
}

task<void> server_state::ended_loop() {
    auto self = shared_from_this();
    for (;;) {
        ended_connection e;
        bool stop = false;
        try {
            e = co_await srq_.ended();
        } catch (...) {
            stop = true;
        }
        if (stop || shut_)
            co_return;
        drop(e.qp_num, e.why);
    }
}

task<void> server_state::own_receives_loop(std::shared_ptr<session> s) {
    auto self = shared_from_this();
    for (;;) {
        received_message m;
        std::string why;
        try {
            m = co_await s->own_receives->next();
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (!why.empty() || shut_) {
            drop(s->qp_num, why);
            co_return;
        }
        on_frame(s, std::move(m));
    }
}

void server_state::admit(cordma::connection c) {
    std::string peer = c.peer();
    auto refuse = [&](const std::string& why) {
        cordma::detail::logf(log_level::warning, "cordma::rpc::server: refused a client from %s: %s", peer.c_str(),
                             why.c_str());
        c.shut_down();
    };
    if (c.is_broken())
        return refuse("its connection broke before it was served");
    auto data = c.peer_private_data();
    if (data.size() < wire::header_size)
        return refuse("its connect request carries no rpc hello (not a cordma::rpc client?)");
    std::string why;
    auto hello = wire::decode(data.first(wire::header_size), why);
    if (!hello)
        return refuse("its hello is malformed: " + why);
    if (hello->type != wire::frame::hello || hello->code != wire::version)
        return refuse(std::string("its hello is a ") + wire::name(hello->type) + " frame of version " +
                      std::to_string(hello->code));
    if (hello->size < 64 || hello->addr == 0)
        return refuse("its hello offers " + std::to_string(hello->size) + " bytes inline and responses up to " +
                      std::to_string(hello->addr) + " bytes (at least 64 and 1)");

    auto s = std::make_shared<session>();
    s->conn = c;
    s->peer = peer;
    s->qp_num = c.qp()->qp_num();
    if (hello->rkey != 0 && (hello->rkey <= hello->size || hello->rkey > (1u << 20)))
        return refuse("its hello offers receives of " + std::to_string(hello->size) + " bytes growing to " +
                      std::to_string(hello->rkey) + " (more, and at most 1 MiB)");
    s->room_small = hello->size;
    s->room_big = hello->rkey;
    s->room_before = s->room_after = hello->size;
    s->client_max_response = hello->addr;
    if (srq_) {
        if (c.qp()->srq() != srq_.native_handle()) {
            c.shut_down();
            throw std::logic_error("cordma::rpc::server::serve: the listener was not made from the builder given "
                                   "to the server (after the server was made): its connections do not receive "
                                   "through the server's shared receive queue");
        }
    }
    sessions_[s->qp_num] = s;
    dropped_.erase(s->qp_num);
    if (!srq_) {
        try {
            s->own_receives.emplace(c, options_.credits, options_.eager_size + wire::header_size);
        } catch (const std::exception& e) {
            sessions_.erase(s->qp_num);
            return refuse(std::string("could not post its receives: ") + e.what());
        }
        spawn_detached(own_receives_loop(s), [](std::exception_ptr) {});
        // Its credits, now that its receives are posted (the client waits
        // for them: hello_deferred_credits).
        s->granted = options_.credits;
        s->unreturned = options_.credits;
        granted_total_ += options_.credits;
        send_credits(s);
        return;
    }
    // Its share of the budget, now or when another client gives some back.
    want(s);
    top_up();
    if (auto it = early_.find(s->qp_num); it != early_.end()) {
        auto frames = std::move(it->second);
        early_.erase(it);
        for (auto& m : frames)
            on_frame(s, std::move(m));
    }
}

void server_state::violation(std::shared_ptr<session> s, std::string why) {
    cordma::detail::logf(log_level::warning, "cordma::rpc::server: client %s: %s; closing its connection",
                         s->peer.c_str(), why.c_str());
    if (s->gone)
        return;
    // Closed, not only shut down: the client is told at once, even while
    // handlers of its calls still hold the connection.
    spawn_detached(s->conn.close(), [](std::exception_ptr) {});
    drop(s->qp_num, why, true);
}

void server_state::drop(std::uint32_t qp_num, const std::string&, bool closing) {
    early_.erase(qp_num);
    dropped_.insert(qp_num);
    auto it = sessions_.find(qp_num);
    if (it == sessions_.end())
        return;
    auto s = it->second;
    sessions_.erase(it);
    s->gone = true;
    s->lent.clear();
    if (s->room_state == session::growth::grown)
        --grown_clients_;
    s->room_state = session::growth::refused;
    // Its credits go back to the budget, but for the receives its running
    // handlers still hold (each given back as its call ends).
    std::uint32_t held = static_cast<std::uint32_t>(std::min<std::size_t>(s->active, s->granted));
    granted_total_ -= s->granted - held;
    s->granted = held;
    if (srq_ && !shut_) {
        // One client fewer: the others' shares may have grown.
        for (auto& [qp, other] : sessions_)
            want(other);
        top_up();
    }
    if (!s->conn.is_broken() && !closing)
        s->conn.shut_down();
    // Its calls still running answer nobody: serve() no longer waits for them.
    active_ -= s->in_progress;
    s->in_progress = 0;
    wake_if_idle();
}

task<void> server_state::serve(listener l, std::stop_token token) {
    auto self = shared_from_this();
    // A listener takes its builder's settings when it is made: one made
    // before the server (whose constructor sets the builder up for rpc) would
    // refuse every rpc client. Say so now, not at the first client.
    if (auto& impl = cordma::detail::listener_access::impl(l)) {
        const connection_settings& have = impl->settings();
        const connection_settings& want = builder_.settings();
        if (have.with_agent || have.private_data != want.private_data || have.shared_receives != want.shared_receives)
            throw std::logic_error("cordma::rpc::server::serve: the listener on " + impl->address() +
                                   " was made before this server (or from another builder), so it would refuse "
                                   "every rpc client: make the rpc::server first, then listen on the builder given "
                                   "to it (rpc::blocking_server does both, in that order)");
    }
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    start_loops();
    if (shut_)
        co_return;
    listeners_.push_back(l);
    std::exception_ptr error;
    for (;;) {
        cordma::connection c;
        bool stop = false;
        try {
            c = co_await l.accept(token);
        } catch (const operation_cancelled&) {
            stop = true;
        } catch (const disconnected_error&) {
            stop = true;  // the listener was closed
        }
        if (stop || shut_)
            break;
        try {
            admit(c);
        } catch (...) {
            error = std::current_exception();
            break;
        }
    }
    l.close();
    // Let the calls in progress answer.
    struct idle_awaiter {
        server_state* self;
        bool await_ready() const noexcept { return self->active_ == 0; }
        void await_suspend(std::coroutine_handle<> h) { self->idle_waiters_.push_back(h); }
        void await_resume() const noexcept {}
    };
    co_await idle_awaiter{this};
    if (error)
        std::rethrow_exception(error);
}

void server_state::shut_down() noexcept {
    try {
        cordma::detail::run_and_wait(*event_listener_, [this] {
            shut_ = true;
            if (reclaim_timer_)
                reclaim_timer_->cancel();
            reclaim_timer_.reset();
            if (room_timer_)
                room_timer_->cancel();
            room_timer_.reset();
            wanting_.clear();
            auto sessions = std::move(sessions_);
            for (auto& [qp, s] : sessions) {
                s->gone = true;
                s->lent.clear();
                s->conn.shut_down();
            }
            early_.clear();
            for (auto& l : listeners_)
                l.close();
            listeners_.clear();
            srq_ = {};
            wake_if_idle(true);
        });
    } catch (...) {
    }
}

server_metrics server_state::metrics() const { return view_->read(); }

void server_state::collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out) {
    static_cast<const server_state*>(self)->running_.collect(now_ms, out);
}

std::size_t server_state::clients() const {
    std::size_t n = 0;
    cordma::detail::run_and_wait(*event_listener_, [&] { n = sessions_.size(); });
    return n;
}

std::vector<cordma::connection> server_state::connections() const {
    std::vector<cordma::connection> out;
    cordma::detail::run_and_wait(*event_listener_, [&] {
        for (const auto& [qp, s] : sessions_)
            out.push_back(s->conn);
    });
    return out;
}

}  // namespace cordma::rpc::detail
