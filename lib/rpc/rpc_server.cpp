// cordma::rpc::server: sessions of the clients a listener accepts, one
// dispatcher over the shared receive queue (or a reader per client's own
// receive queue), a coroutine per call that runs its handler and answers.
// The protocol is in rpc_wire.hpp and docs/rpc.md.
#include <cordma/rpc.hpp>

#include <infiniband/verbs.h>

#include <algorithm>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/task_group.hpp>

#include "connect/acceptor.hpp"
#include "engine/run_and_wait.hpp"
#include "rpc/frame_buffers.hpp"
#include "rpc/rpc_wire.hpp"
#include "log/logf.hpp"

namespace cordma::rpc::detail {

namespace wire = cordma::detail::rpc_wire;

namespace {

/// Resumes the awaiting coroutine inside a function handed to `executor`.
struct via_executor {
    const std::function<void(std::function<void()>)>* executor;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { (*executor)([h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

/// A large response the client has yet to read: kept registered until its
/// `done` (or the end of the connection).
struct lent_response {
    std::vector<std::byte> bytes;
    local_mr registration;
};

struct session {
    cordma::connection conn;
    std::string peer;
    std::uint32_t qp_num = 0;
    std::size_t client_eager = 0;        // the largest inline response it takes
    std::uint64_t client_max_response = 0;
    std::uint32_t charged = 0;           // its calls holding a credit
    std::uint32_t unreturned = 0;        // credits to hand back with the next frame
    std::size_t active = 0;              // calls whose handler runs (a response would carry credits)
    std::size_t in_progress = 0;         // calls not answered yet: what serve() waits for
    std::unordered_map<std::uint64_t, lent_response> lent;
    std::optional<receive_queue> own_receives;  // without the SRQ
    bool gone = false;
};

std::string method_list(const std::map<std::uint32_t, std::pair<std::string, handler>>& handlers) {
    std::string out;
    for (const auto& [method, entry] : handlers)
        out += (out.empty() ? "" : ", ") + std::to_string(method) + " " + entry.first;
    return out.empty() ? "none" : out;
}

}  // namespace

class server_state : public std::enable_shared_from_this<server_state> {
public:
    server_state(builder& b, server_options options);

    void handle(std::uint32_t method, std::string name, handler h);
    void handle_any(std::string name, handler h);
    task<void> serve(listener l, std::stop_token token);
    void shut_down() noexcept;

    std::size_t clients() const;
    std::vector<cordma::connection> connections() const;
    ibv_srq* srq_handle() const { return srq_ ? srq_.native_handle() : nullptr; }
    const server_options& options() const noexcept { return options_; }

private:
    void start_loops();
    task<void> dispatch_loop();
    task<void> ended_loop();
    task<void> own_receives_loop(std::shared_ptr<session> s);
    void admit(cordma::connection c);
    void on_frame(std::shared_ptr<session> s, received_message m);
    void violation(std::shared_ptr<session> s, std::string why);
    void drop(std::uint32_t qp_num, const std::string& why, bool closing = false);
    task<void> run_call(std::shared_ptr<session> s, wire::header h, received_message m);
    task<void> send_frame(std::shared_ptr<session> s, wire::header h, std::span<const std::byte> payload);
    void call_finished(session& s);
    /// A call is answered (or its client gone): serve() may stop waiting.
    void answered(session& s);
    /// Resumes serve() waiting for the calls in progress, once there are none.
    void wake_if_idle(bool anyway = false) {
        if (active_ == 0 || anyway)
            for (auto h : std::exchange(idle_waiters_, {}))
                h.resume();
    }

    builder builder_;
    server_options options_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    std::shared_ptr<protection_domain> pd_;
    cordma::shared_receive_queue srq_;
    std::unique_ptr<std::byte[]> heartbeat_memory_;
    local_mr heartbeat_;
    cordma::detail::frame_buffers buffers_;
    std::map<std::uint32_t, std::pair<std::string, handler>> handlers_;
    std::optional<std::pair<std::string, handler>> any_;  // for methods not in handlers_
    std::unordered_map<std::uint32_t, std::shared_ptr<session>> sessions_;
    // Frames that arrived through the SRQ before serve() took their
    // connection from accept() (the client may send as soon as it is
    // connected): handled once it has.
    std::unordered_map<std::uint32_t, std::vector<received_message>> early_;
    // Connections dropped: their frames still in flight are dropped too
    // (until a new connection reuses the QP number).
    std::unordered_set<std::uint32_t> dropped_;
    std::vector<listener> listeners_;  // being served: closed by shut_down
    std::size_t active_ = 0;
    std::vector<std::coroutine_handle<>> idle_waiters_;
    bool loops_started_ = false;
    bool warned_receives_ = false;
    bool shut_ = false;
};

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
    bool srq = options_.shared_receives && cordma::shared_receive_queue::supported(b);
    if (options_.shared_receives && !srq)
        cordma::detail::logf(log_level::warning,
                             "cordma::rpc::server: device %s has no shared receive queues: each client gets its own "
                             "%u receives of %zu bytes instead",
                             b.event_listener()->device()->name().c_str(), options_.credits,
                             options_.eager_size + wire::header_size);
    if (srq)
        srq_ = cordma::shared_receive_queue(b, options_.receives, options_.eager_size + wire::header_size);
    heartbeat_memory_ = std::make_unique<std::byte[]>(8);
    heartbeat_ = register_local_mr(pd_, heartbeat_memory_.get(), 8, access_flags::remote_read);

    // The hello every client gets in the accept: its credits, the largest
    // inline request, the largest request, the heartbeat word.
    wire::header hello;
    hello.type = wire::frame::hello;
    hello.credits = options_.credits;
    hello.code = wire::version | (srq ? 0 : wire::hello_deferred_credits << 16);
    hello.size = options_.eager_size;
    hello.addr = options_.max_request;
    hello.id = reinterpret_cast<std::uint64_t>(heartbeat_.data());
    hello.rkey = heartbeat_.rkey();
    std::array<std::byte, wire::header_size> bytes{};
    wire::encode(hello, bytes);
    b.agent(false);
    b.private_data(std::span<const std::byte>(bytes));
    b.shared_receives(srq_);
    // A client whose request finds no receive posted retries after this
    // (only when the SRQ is full: soon, then) rather than 655 ms.
    if (b.settings().min_rnr_timer == 0)
        b.min_rnr_timer(12);
    builder_ = b;
}

void server_state::handle(std::uint32_t method, std::string name, handler h) {
    if (!h)
        throw std::invalid_argument("cordma::rpc::server::handle(" + std::to_string(method) + ", \"" + name +
                                    "\"): the handler is empty");
    cordma::detail::run_and_wait(*event_listener_, [&] {
        auto [it, added] = handlers_.try_emplace(method, std::move(name), std::move(h));
        if (!added)
            throw std::invalid_argument("cordma::rpc::server::handle(" + std::to_string(method) +
                                        "): the method is registered already, as \"" + it->second.first + "\"");
    });
}

void server_state::handle_any(std::string name, handler h) {
    if (!h)
        throw std::invalid_argument("cordma::rpc::server::handle_any(\"" + name + "\"): the handler is empty");
    cordma::detail::run_and_wait(*event_listener_, [&] {
        if (any_)
            throw std::invalid_argument("cordma::rpc::server::handle_any: registered already, as \"" + any_->first +
                                        "\"");
        any_.emplace(std::move(name), std::move(h));
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
    s->client_eager = hello->size;
    s->client_max_response = hello->addr;
    if (srq_) {
        if (c.qp()->srq() != srq_.native_handle()) {
            c.shut_down();
            throw std::logic_error("cordma::rpc::server::serve: the listener was not made from the builder given "
                                   "to the server (after the server was made): its connections do not receive "
                                   "through the server's shared receive queue");
        }
        if (!warned_receives_ && (sessions_.size() + 1) * options_.credits > options_.receives) {
            warned_receives_ = true;
            cordma::detail::logf(
                log_level::warning,
                "cordma::rpc::server: %zu clients x %u credits is more than the %zu receives: clients may "
                "wait in receiver-not-ready retries (raise server_options::receives)",
                sessions_.size() + 1, options_.credits, options_.receives);
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
        s->unreturned = options_.credits;
        spawn_detached(send_frame(s, {.type = wire::frame::credit}, {}), [](std::exception_ptr) {});
        return;
    }
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
    if (!s->conn.is_broken() && !closing)
        s->conn.shut_down();
    // Its calls still running answer nobody: serve() no longer waits for them.
    active_ -= s->in_progress;
    s->in_progress = 0;
    wake_if_idle();
}

void server_state::on_frame(std::shared_ptr<session> s, received_message m) {
    if (s->gone)
        return;
    std::string why;
    auto h = wire::decode(m.bytes(), why);
    if (!h)
        return violation(s, "a malformed frame: " + why);
    switch (h->type) {
    case wire::frame::request:
    case wire::frame::request_rts: {
        if (h->credits != 0)
            return violation(s, std::string("a ") + wire::name(h->type) + " frame handing back credits (" +
                                    std::to_string(h->credits) + "), which only the server does");
        if (s->charged >= options_.credits)
            return violation(s, "a call beyond its " + std::to_string(options_.credits) + " credits");
        ++s->charged;
        ++s->active;
        ++s->in_progress;
        ++active_;
        spawn_detached(run_call(s, *h, std::move(m)), [](std::exception_ptr) {});
        return;
    }
    case wire::frame::done: {
        auto it = s->lent.find(h->id);
        if (it == s->lent.end())
            return violation(s, "a done frame for call " + std::to_string(h->id) +
                                    ", which has no response waiting to be read");
        s->lent.erase(it);
        --s->charged;
        ++s->unreturned;
        // Hand the credit back now unless a response is about to carry it.
        if (s->active == 0)
            spawn_detached(send_frame(s, {.type = wire::frame::credit}, {}), [](std::exception_ptr) {});
        return;
    }
    default:
        return violation(s, std::string("a ") + wire::name(h->type) + " frame, which only a server sends");
    }
}

task<void> server_state::run_call(std::shared_ptr<session> s, wire::header h, received_message m) {
    auto self = shared_from_this();
    std::uint32_t status = 0;
    std::string message;
    std::vector<std::byte> response;
    std::unique_ptr<std::byte[]> large;  // a large request, read from the client
    local_mr large_mr;
    std::span<const std::byte> payload;
    bool read_failed = false;
    auto found = handlers_.find(h.code);
    const std::pair<std::string, handler>* entry = found != handlers_.end() ? &found->second : any_ ? &*any_ : nullptr;

    if (h.type == wire::frame::request) {
        payload = m.bytes().subspan(wire::header_size);
    } else {
        m.release();  // the frame is only its header: give the receive back at once
        if (h.size > options_.max_request) {
            status = static_cast<std::uint32_t>(rpc_errc::too_large);
            message = "a request of " + std::to_string(h.size) + " bytes, over the server's max_request of " +
                      std::to_string(options_.max_request);
        } else if (entry != nullptr) {
            try {
                large.reset(new std::byte[h.size]);
                large_mr = register_local_mr(pd_, large.get(), h.size, access_flags::local_write);
                remote_slice from{h.addr, h.size, h.rkey, access_flags::remote_read};
                co_await s->conn.read(large_mr.all(), from);
                payload = std::span<const std::byte>(large.get(), h.size);
            } catch (const std::exception& e) {
                read_failed = true;
                message = e.what();
            }
        }
    }
    if (read_failed) {
        // The client's memory could not be read: its connection is broken.
        large_mr = {};
        call_finished(*s);
        violation(s, "reading its request of " + std::to_string(h.size) + " bytes failed: " + message);
        co_return;
    }
    if (status == 0 && entry == nullptr) {
        status = static_cast<std::uint32_t>(rpc_errc::unknown_method);
        message = "no method " + std::to_string(h.code) + " on this server (it has: " + method_list(handlers_) + ")";
    }
    if (status == 0) {
        const handler& fn = entry->second;
        bool hopped = false;
        try {
            if (options_.executor) {
                hopped = true;
                co_await via_executor{&options_.executor};
            }
            response = co_await fn(request(payload, h.code, &s->peer));
        } catch (const std::exception& e) {
            status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
            message = "method " + std::to_string(h.code) + " (" + entry->first + ") failed: " + e.what();
        } catch (...) {
            status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
            message = "method " + std::to_string(h.code) + " (" + entry->first +
                      ") failed: it threw something not derived from std::exception";
        }
        if (hopped || !event_listener_->running_in_this_thread())
            co_await event_listener_->schedule();
    }
    m.release();
    large_mr = {};
    large.reset();

    if (s->gone || shut_) {
        call_finished(*s);
        co_return;
    }
    wire::header out;
    out.id = h.id;
    std::span<const std::byte> inline_bytes;
    if (status == 0 && response.size() > s->client_eager) {
        if (response.size() > s->client_max_response) {
            status = static_cast<std::uint32_t>(rpc_errc::too_large);
            message = "a response of " + std::to_string(response.size()) + " bytes, over the client's max_response of " +
                      std::to_string(s->client_max_response);
        } else {
            // The client reads it from here, then says done (which
            // returns the call's credit).
            try {
                lent_response lent;
                lent.registration = register_local_mr(pd_, response.data(), response.size(), access_flags::remote_read);
                out.type = wire::frame::response_rts;
                out.size = response.size();
                out.addr = reinterpret_cast<std::uint64_t>(response.data());
                out.rkey = lent.registration.rkey();
                lent.bytes = std::move(response);
                s->lent.emplace(h.id, std::move(lent));
            } catch (const std::exception& e) {
                status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
                message = std::string("could not register the response for the client to read: ") + e.what();
            }
        }
    }
    if (out.type != wire::frame::response_rts) {
        out.type = wire::frame::response;
        out.code = status;
        if (status != 0) {
            if (message.size() > s->client_eager)
                message.resize(s->client_eager);
            inline_bytes = std::as_bytes(std::span<const char>(message.data(), message.size()));
        } else {
            inline_bytes = response;
        }
        --s->charged;
        ++s->unreturned;
    }
    --s->active;
    co_await send_frame(s, out, inline_bytes);
    answered(*s);
}

void server_state::call_finished(session& s) {
    --s.active;
    --s.charged;
    answered(s);
}

void server_state::answered(session& s) {
    if (s.gone)
        return;  // drop() took its calls off the count
    --s.in_progress;
    --active_;
    wake_if_idle();
}

task<void> server_state::send_frame(std::shared_ptr<session> s, wire::header h, std::span<const std::byte> payload) {
    auto self = shared_from_this();
    if (s->gone)
        co_return;
    h.credits = std::exchange(s->unreturned, 0);
    h.size = h.type == wire::frame::response ? payload.size() : h.size;
    local_mr buffer = buffers_.take(wire::header_size + payload.size());
    wire::encode(h, buffer.bytes().first<wire::header_size>());
    if (!payload.empty())
        std::memcpy(buffer.data() + wire::header_size, payload.data(), payload.size());
    bool failed = false;
    try {
        co_await s->conn.send(buffer.slice(0, wire::header_size + payload.size()));
    } catch (...) {
        failed = true;  // the connection broke: ended() (or its reader) drops the session
    }
    buffers_.give(std::move(buffer));
    if (failed && !s->gone && s->conn.is_broken() && !srq_)
        drop(s->qp_num, "a send failed");
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

namespace cordma::rpc {

server::server(builder& b, server_options options)
    : state_(std::make_shared<detail::server_state>(b, std::move(options))) {}

server& server::operator=(server&& other) noexcept {
    if (this != &other) {
        if (state_)
            state_->shut_down();
        state_ = std::move(other.state_);
    }
    return *this;
}

server::~server() {
    if (state_)
        state_->shut_down();
}

namespace {
detail::server_state& checked(const std::shared_ptr<detail::server_state>& s, const char* call) {
    if (!s)
        throw std::logic_error(std::string("cordma::rpc::server::") + call + " on an empty (moved-from) server");
    return *s;
}
}  // namespace

void server::handle(std::uint32_t method, std::string name, handler h) {
    checked(state_, "handle").handle(method, std::move(name), std::move(h));
}

void server::handle_any(std::string name, handler h) {
    checked(state_, "handle_any").handle_any(std::move(name), std::move(h));
}

task<void> server::serve(listener l, std::stop_token token) {
    auto state = state_;
    checked(state, "serve");
    co_await state->serve(std::move(l), std::move(token));
}

std::size_t server::clients() const { return checked(state_, "clients").clients(); }
std::vector<cordma::connection> server::connections() const { return checked(state_, "connections").connections(); }
ibv_srq* server::shared_receive_queue() const { return checked(state_, "shared_receive_queue").srq_handle(); }
const server_options& server::options() const { return checked(state_, "options").options(); }

}  // namespace cordma::rpc
