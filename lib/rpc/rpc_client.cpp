// cordma::rpc::client: calls numbered and matched by id, credits from the
// server, a reader of the client's receive queue, rendezvous both ways, a
// liveness read while calls wait. The protocol is in rpc_wire.hpp and
// docs/rpc.md.
#include <cordma/rpc.hpp>

#include <time.h>

#include <algorithm>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>

#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/shared_receive_queue.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task_group.hpp>

#include "engine/delay.hpp"
#include "rpc/frame_buffers.hpp"
#include "rpc/rpc_wire.hpp"

namespace cordma::rpc::detail {

namespace wire = cordma::detail::rpc_wire;

namespace {

/// While calls wait, the client reads the server's liveness word this
/// often, and takes the server for gone when a read is not answered in time.
constexpr std::chrono::seconds liveness_interval{1};
constexpr std::chrono::milliseconds liveness_timeout{3000};

/// The clock of call deadlines: CLOCK_MONOTONIC_COARSE. Deadlines need
/// milliseconds, and every call reads the clock once: a precise read costs
/// about a microsecond where the clock source is slow (HPET in a VM: 1.16
/// us, measured by bench/rpc), a coarse one a few nanoseconds anywhere.
struct coarse_clock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<coarse_clock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept {
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
    /// How far behind the precise clock it may be: added to every deadline,
    /// so none passes early.
    static duration resolution() noexcept {
        static const duration r = [] {
            timespec ts{};
            clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
            return duration(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
        }();
        return r;
    }
};

/// A call from its start to its answer; lives in the calling coroutine's frame.
struct pending_call {
    std::uint64_t id = 0;
    std::uint32_t method = 0;
    std::coroutine_handle<> waiter;
    bool has_credit = false;
    bool sent = false;
    bool finished = false;
    std::vector<std::byte> response;
    std::optional<rpc_errc> error;
    std::string message;
    local_mr registration;  // a large request, for the server to read
    coarse_clock::time_point deadline;
    std::chrono::milliseconds limit{0};
};

struct wait_for {
    pending_call* call;
    bool for_credit;
    bool await_ready() const noexcept { return call->finished || (for_credit && call->has_credit); }
    void await_suspend(std::coroutine_handle<> h) noexcept { call->waiter = h; }
    void await_resume() noexcept { call->waiter = {}; }
};

void check_options(const client_options& o) {
    auto bad = [](const std::string& what) {
        throw std::invalid_argument("cordma::rpc::client::connect: client_options::" + what);
    };
    if (o.eager_size < 64 || o.eager_size > (std::size_t(1) << 20))
        bad("eager_size = " + std::to_string(o.eager_size) + " is out of range (64 B to 1 MiB)");
    if (o.deadline.count() <= 0)
        bad("deadline = " + std::to_string(o.deadline.count()) + " ms: it must be positive");
    if (o.max_response == 0)
        bad("max_response = 0: no response could be accepted");
}

}  // namespace

class client_state : public std::enable_shared_from_this<client_state> {
public:
    client_state(builder b, client_options options, cordma::connection conn, const wire::header& hello);

    void start();
    task<std::vector<std::byte>> call(std::uint32_t method, std::span<const std::byte> request, call_options o);
    void shut_down(rpc_errc why, const std::string& message) noexcept;
    task<void> close();

    const std::string& peer() const noexcept { return peer_; }
    std::uint32_t credits() const noexcept { return credits_; }
    const cordma::connection& connection() const noexcept { return conn_; }
    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }

private:
    task<void> read_loop();
    task<void> liveness_loop();
    task<void> fetch(std::uint64_t id, wire::header h);
    task<void> send_done(std::uint64_t id);
    void on_frame(received_message m);
    void finish(pending_call& c, std::optional<rpc_errc> error, std::string message);
    void fail(std::uint64_t id, rpc_errc error, std::string message);
    void broken(rpc_errc error, const std::string& why);
    void grant();
    void forget(pending_call& c) noexcept;
    /// Deadlines: one timer for the earliest of the calls', re-armed as it
    /// fires, rather than one per call (a kernel timeout each, alive for the
    /// whole deadline even when the call ends in microseconds).
    void watch_deadline(coarse_clock::time_point when);
    void on_deadline();
    std::string what_call(const pending_call& c) const {
        return "cordma::rpc call " + std::to_string(c.id) + " of method " + std::to_string(c.method) + " to " + peer_;
    }

    builder builder_;
    client_options options_;
    cordma::connection conn_;
    std::string peer_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    std::optional<receive_queue> receives_;
    cordma::detail::frame_buffers buffers_;
    std::uint32_t credits_ = 0;    // what the server grants (its hello, or its first credit frame)
    std::uint32_t available_ = 0;  // credits not in use
    std::size_t server_eager_ = 0;
    std::uint64_t server_max_request_ = 0;
    remote_slice liveness_word_;
    local_mr liveness_local_;
    std::uint64_t next_id_ = 1;
    std::unordered_map<std::uint64_t, pending_call*> calls_;
    std::deque<pending_call*> credit_waiters_;
    // Large requests of calls that ended early: registered until the
    // server answers them (it may still be reading).
    std::unordered_map<std::uint64_t, local_mr> orphans_;
    std::optional<std::pair<rpc_errc, std::string>> broken_;
    bool liveness_running_ = false;
    std::shared_ptr<cordma::event_listener::timer> deadline_timer_;
    coarse_clock::time_point armed_for_ = coarse_clock::time_point::max();
};

client_state::client_state(builder b, client_options options, cordma::connection conn, const wire::header& hello)
    : builder_(std::move(b)),
      options_(options),
      conn_(std::move(conn)),
      peer_(conn_.peer()),
      event_listener_(conn_.event_listener()),
      buffers_(builder_.pool()),
      credits_(hello.credits),
      available_((hello.code >> 16) & wire::hello_deferred_credits ? 0 : hello.credits),
      server_eager_(hello.size),
      server_max_request_(hello.addr),
      liveness_word_{hello.id, 8, hello.rkey, access_flags::remote_read} {
    liveness_local_ = builder_.pool()->allocate(8);
}

void client_state::start() {
    // Room for every response (one per credit) and the credit frames the
    // server may send besides (at most one per credit as well).
    std::size_t count = 2 * std::size_t(credits_) + 2;
    std::size_t room = conn_.qp()->capacity().max_recv_wr;
    if (room < std::size_t(credits_) + 2)
        throw std::invalid_argument("cordma::rpc::client::connect(" + peer_ + "): the server grants " +
                                    std::to_string(credits_) + " calls in flight, and the builder's " +
                                    "recv_queue_depth (" + std::to_string(room) + ") cannot hold their responses: " +
                                    "raise it to " + std::to_string(count));
    receives_.emplace(conn_, std::min(count, room), options_.eager_size + wire::header_size);
    spawn_detached(read_loop(), [](std::exception_ptr) {});
}

task<void> client_state::read_loop() {
    auto self = shared_from_this();
    for (;;) {
        received_message m;
        std::string why;
        try {
            m = co_await receives_->next();
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (!why.empty()) {
            broken(rpc_errc::server_gone, "the connection broke: " + why);
            co_return;
        }
        on_frame(std::move(m));
        if (broken_)
            co_return;
    }
}

void client_state::on_frame(received_message m) {
    std::string why;
    auto h = wire::decode(m.bytes(), why);
    if (!h) {
        spawn_detached(conn_.close(), [](std::exception_ptr) {});
        return broken(rpc_errc::protocol, "the server sent a malformed frame (" + why + "); connection closed");
    }
    if (h->type != wire::frame::response && h->type != wire::frame::response_rts && h->type != wire::frame::credit) {
        spawn_detached(conn_.close(), [](std::exception_ptr) {});
        return broken(rpc_errc::protocol, std::string("the server sent a ") + wire::name(h->type) +
                                              " frame, which only a client sends; connection closed");
    }
    available_ += h->credits;
    if (h->type != wire::frame::credit) {
        orphans_.erase(h->id);  // answered: the server is done with its request
        auto it = calls_.find(h->id);
        pending_call* c = it == calls_.end() ? nullptr : it->second;
        if (c != nullptr)
            c->registration = {};  // answered: the server is done reading its request
        if (h->type == wire::frame::response) {
            if (c != nullptr) {
                auto payload = m.bytes().subspan(wire::header_size);
                if (h->code == 0) {
                    c->response.assign(payload.begin(), payload.end());
                    finish(*c, std::nullopt, {});
                } else {
                    std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
                    auto code = h->code <= static_cast<std::uint32_t>(rpc_errc::server_gone)
                                    ? static_cast<rpc_errc>(h->code)
                                    : rpc_errc::protocol;
                    finish(*c, code, what_call(*c) + ": " + text);
                }
            }
        } else if (c == nullptr) {
            spawn_detached(send_done(h->id), [](std::exception_ptr) {});  // nobody waits for it any more
        } else if (h->size > options_.max_response) {
            finish(*c, rpc_errc::too_large,
                   what_call(*c) + ": a response of " + std::to_string(h->size) +
                       " bytes, over the client's max_response of " + std::to_string(options_.max_response));
            spawn_detached(send_done(h->id), [](std::exception_ptr) {});
        } else {
            spawn_detached(fetch(h->id, *h), [](std::exception_ptr) {});
        }
    }
    m.release();
    grant();
}

task<void> client_state::fetch(std::uint64_t id, wire::header h) {
    auto self = shared_from_this();
    std::vector<std::byte> bytes(h.size);
    std::string error;
    try {
        local_mr into = register_local_mr(builder_.pd(), bytes.data(), bytes.size(), access_flags::local_write);
        remote_slice from{h.addr, h.size, h.rkey, access_flags::remote_read};
        co_await conn_.read(into.all(), from);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (!error.empty()) {
        fail(id, rpc_errc::server_gone, "reading the response of " + std::to_string(h.size) + " bytes failed: " + error);
        co_return;
    }
    co_await send_done(id);
    auto it = calls_.find(id);
    if (it != calls_.end()) {
        it->second->response = std::move(bytes);
        finish(*it->second, std::nullopt, {});
    }
}

task<void> client_state::send_done(std::uint64_t id) {
    // The call's credit still covers this frame: the server hands it back
    // once it has the done.
    auto self = shared_from_this();
    wire::header h;
    h.type = wire::frame::done;
    h.id = id;
    local_mr buffer = buffers_.take(wire::header_size);
    wire::encode(h, buffer.bytes().first<wire::header_size>());
    try {
        co_await conn_.send(buffer.slice(0, wire::header_size));
    } catch (...) {
    }
    buffers_.give(std::move(buffer));
}

void client_state::grant() {
    while (available_ > 0 && !credit_waiters_.empty()) {
        pending_call* c = credit_waiters_.front();
        credit_waiters_.pop_front();
        --available_;
        c->has_credit = true;
        if (c->waiter)
            c->waiter.resume();
    }
}

void client_state::finish(pending_call& c, std::optional<rpc_errc> error, std::string message) {
    if (c.finished)
        return;
    c.finished = true;
    c.error = error;
    c.message = std::move(message);
    forget(c);
    if (c.waiter)
        c.waiter.resume();
}

void client_state::forget(pending_call& c) noexcept {
    if (auto it = calls_.find(c.id); it != calls_.end() && it->second == &c)
        calls_.erase(it);
    if (auto it = std::find(credit_waiters_.begin(), credit_waiters_.end(), &c); it != credit_waiters_.end())
        credit_waiters_.erase(it);
    if (c.registration && c.sent && !broken_) {
        try {
            orphans_.emplace(c.id, std::move(c.registration));
        } catch (...) {
        }
    }
}

void client_state::watch_deadline(coarse_clock::time_point when) {
    if (when >= armed_for_)
        return;  // the timer fires before this deadline, and re-arms for it then
    if (deadline_timer_)
        deadline_timer_->cancel();
    armed_for_ = when;
    std::weak_ptr<client_state> weak = weak_from_this();
    auto delay = std::max<std::chrono::nanoseconds>(when - coarse_clock::now(), std::chrono::nanoseconds(0));
    deadline_timer_ = event_listener_->call_after(delay, [weak] {
        if (auto s = weak.lock())
            s->on_deadline();
    });
}

void client_state::on_deadline() {
    armed_for_ = coarse_clock::time_point::max();
    deadline_timer_.reset();
    auto now = coarse_clock::now();
    std::vector<std::uint64_t> expired;
    auto next = coarse_clock::time_point::max();
    for (const auto& [id, c] : calls_) {
        if (c->deadline <= now)
            expired.push_back(id);
        else
            next = std::min(next, c->deadline);
    }
    for (std::uint64_t id : expired) {
        auto it = calls_.find(id);
        if (it != calls_.end())
            fail(id, rpc_errc::timed_out,
                 "no answer within its deadline of " + std::to_string(it->second->limit.count()) + " ms");
    }
    if (next != coarse_clock::time_point::max())
        watch_deadline(next);
}

void client_state::fail(std::uint64_t id, rpc_errc error, std::string message) {
    auto it = calls_.find(id);
    if (it != calls_.end())
        finish(*it->second, error, what_call(*it->second) + ": " + message);
}

void client_state::broken(rpc_errc error, const std::string& why) {
    if (!broken_)
        broken_.emplace(error, why);
    orphans_.clear();
    while (!calls_.empty()) {
        pending_call* c = calls_.begin()->second;
        finish(*c, error, what_call(*c) + ": " + why);
    }
}

void client_state::shut_down(rpc_errc why, const std::string& message) noexcept {
    conn_.shut_down();
    std::weak_ptr<client_state> weak = weak_from_this();
    try {
        event_listener_->post([weak, why, message] {
            if (auto self = weak.lock())
                self->broken(why, message);
        });
    } catch (...) {
    }
}

task<void> client_state::close() {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    broken(rpc_errc::cancelled, "the client was closed");
    co_await conn_.close();
}

task<void> client_state::liveness_loop() {
    auto self = shared_from_this();
    liveness_running_ = true;
    while (!calls_.empty() && !broken_) {
        co_await cordma::detail::after(*event_listener_, liveness_interval);
        if (calls_.empty() || broken_)
            break;
        // The read is answered by the server's device, not its process: it
        // fails only if the server's host (or the link) is gone. Waiting
        // for the QP's retries is not enough: the user's builder may set
        // retry_count 7, which rxe retries forever, and a call that sends
        // nothing while it waits has no retries running at all.
        std::string error;
        std::stop_source give_up;
        auto limit = event_listener_->call_after(liveness_timeout, [give_up]() mutable { give_up.request_stop(); });
        try {
            co_await conn_.read(liveness_local_.all(), liveness_word_, give_up.get_token());
        } catch (const operation_cancelled&) {
            error = "no answer within " + std::to_string(liveness_timeout.count()) + " ms";
        } catch (const std::exception& e) {
            error = e.what();
        }
        limit->cancel();
        if (!error.empty())
            conn_.shut_down();
        if (!error.empty()) {
            broken(rpc_errc::server_gone, "the server stopped answering (a liveness read failed: " + error + ")");
            break;
        }
    }
    liveness_running_ = false;
}

task<std::vector<std::byte>> client_state::call(std::uint32_t method, std::span<const std::byte> request,
                                                 call_options o) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    pending_call c;
    c.id = next_id_++;
    c.method = method;
    if (broken_)
        throw rpc_error(broken_->first, what_call(c) + ": " + broken_->second);
    if (request.size() > server_max_request_)
        throw rpc_error(rpc_errc::too_large, what_call(c) + ": a request of " + std::to_string(request.size()) +
                                                 " bytes, over the server's max_request of " +
                                                 std::to_string(server_max_request_));
    // Whatever ends the call (an answer, the deadline, the token, the
    // coroutine being destroyed) leaves nothing pointing at `c`.
    struct guard {
        client_state* self;
        pending_call* c;
        ~guard() {
            self->forget(*c);
            if (c->has_credit && !c->sent) {  // never used: back to the next call
                ++self->available_;
                c->has_credit = false;
                self->grant();
            }
        }
    } g{this, &c};
    calls_.emplace(c.id, &c);
    c.limit = o.deadline.count() > 0 ? o.deadline : options_.deadline;
    c.deadline = coarse_clock::now() + c.limit + coarse_clock::resolution();
    watch_deadline(c.deadline);
    std::weak_ptr<client_state> weak = weak_from_this();
    std::uint64_t id = c.id;
    std::optional<std::stop_callback<std::function<void()>>> on_stop;
    if (o.token.stop_possible()) {
        auto el = event_listener_;
        on_stop.emplace(o.token, std::function<void()>([weak, id, el] {
                            el->post([weak, id] {
                                if (auto s = weak.lock())
                                    s->fail(id, rpc_errc::cancelled, "cancelled through its stop token");
                            });
                        }));
    }
    if (!liveness_running_)
        spawn_detached(liveness_loop(), [](std::exception_ptr) {});

    if (available_ > 0 && credit_waiters_.empty()) {
        --available_;
        c.has_credit = true;
    } else {
        credit_waiters_.push_back(&c);
        co_await wait_for{&c, true};
    }
    if (!c.finished) {
        wire::header h;
        h.id = c.id;
        h.code = method;
        std::span<const std::byte> inline_bytes;
        std::string error;
        local_mr buffer;
        try {
            if (request.size() <= server_eager_) {
                h.type = wire::frame::request;
                h.size = request.size();
                inline_bytes = request;
            } else {
                c.registration = register_local_mr(builder_.pd(), const_cast<std::byte*>(request.data()),
                                                   request.size(), access_flags::remote_read);
                h.type = wire::frame::request_rts;
                h.size = request.size();
                h.addr = reinterpret_cast<std::uint64_t>(request.data());
                h.rkey = c.registration.rkey();
            }
            buffer = buffers_.take(wire::header_size + inline_bytes.size());
            wire::encode(h, buffer.bytes().first<wire::header_size>());
            if (!inline_bytes.empty())
                std::memcpy(buffer.data() + wire::header_size, inline_bytes.data(), inline_bytes.size());
        } catch (const std::exception& e) {
            error = e.what();
        }
        if (!error.empty())
            finish(c, rpc_errc::too_large, what_call(c) + ": could not prepare the request: " + error);
        if (!c.finished) {
            c.sent = true;
            bool send_failed = false;
            try {
                co_await conn_.send(buffer.slice(0, wire::header_size + inline_bytes.size()));
            } catch (const std::exception& e) {
                send_failed = true;
                error = e.what();
            }
            if (send_failed)
                broken(rpc_errc::server_gone, "sending a request failed: " + error);
        }
        buffers_.give(std::move(buffer));
        co_await wait_for{&c, false};
    }
    on_stop.reset();
    if (c.error)
        throw rpc_error(*c.error, c.message);
    co_return std::move(c.response);
}

}  // namespace cordma::rpc::detail

namespace cordma::rpc {

namespace wire = cordma::detail::rpc_wire;

task<client> client::connect(builder b, std::string address, client_options options) {
    detail::check_options(options);
    wire::header hello;
    hello.type = wire::frame::hello;
    hello.code = wire::version;
    hello.size = options.eager_size;
    hello.addr = options.max_response;
    std::array<std::byte, wire::header_size> bytes{};
    wire::encode(hello, bytes);
    b.agent(false);
    b.private_data(std::span<const std::byte>(bytes));
    b.shared_receives(cordma::shared_receive_queue{});
    cordma::connection c = co_await b.connect(address);
    std::string why;
    std::optional<wire::header> server_hello;
    auto data = c.peer_private_data();
    if (data.size() >= wire::header_size)
        server_hello = wire::decode(data.first(wire::header_size), why);
    else
        why = "its accept carries no rpc hello";
    if (server_hello && (server_hello->type != wire::frame::hello || (server_hello->code & 0xffff) != wire::version ||
                         server_hello->size < 64 || server_hello->addr == 0)) {
        why = std::string("its hello is a ") + wire::name(server_hello->type) + " frame of version " +
              std::to_string(server_hello->code & 0xffff);
        server_hello.reset();
    }
    if (!server_hello) {
        co_await c.close();
        throw rpc_error(rpc_errc::protocol,
                        "cordma::rpc::client::connect(" + address + "): not a cordma rpc server: " + why);
    }
    auto state = std::make_shared<detail::client_state>(b, options, c, *server_hello);
    state->start();
    co_return client(std::move(state));
}

client& client::operator=(client&& other) noexcept {
    if (this != &other) {
        if (state_)
            state_->shut_down(rpc_errc::cancelled, "the client was destroyed");
        state_ = std::move(other.state_);
    }
    return *this;
}

client::~client() {
    if (state_)
        state_->shut_down(rpc_errc::cancelled, "the client was destroyed");
}

detail::client_state& client::checked(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("cordma::rpc::client::") + call + " on an empty client handle");
    return *state_;
}

task<std::vector<std::byte>> client::call(std::uint32_t method, std::span<const std::byte> request,
                                          call_options options) {
    auto state = state_;
    checked("call");
    std::vector<std::byte> response = co_await state->call(method, request, std::move(options));
    co_return response;
}

std::vector<std::byte> client::call_sync(std::uint32_t method, std::span<const std::byte> request,
                                         call_options options) {
    auto& state = checked("call_sync");
    if (state.event_listener()->running_in_this_thread())
        throw std::logic_error("cordma::rpc::client::call_sync on the event listener thread would wait for "
                               "itself: co_await call() there");
    return sync_wait(call(method, request, std::move(options)));
}

task<void> client::close() {
    auto state = state_;
    checked("close");
    co_await state->close();
}

const std::string& client::peer() const { return checked("peer").peer(); }
std::uint32_t client::credits() const { return checked("credits").credits(); }
const cordma::connection& client::connection() const { return checked("connection").connection(); }

}  // namespace cordma::rpc
