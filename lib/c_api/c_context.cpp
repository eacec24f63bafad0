// The C API's context and peers: settings, create/destroy, connect,
// accept and disconnect (with the C hello that sizes each link), the
// accessors, and the deadline and keepalives every call runs under.
#include "c_api/c_context.hpp"
#include "c_api/c_call.hpp"
#include "c_api/c_arrivals.hpp"
#include "connect/qp_settings.hpp"
#include "link/link_hello.hpp"
#include "log/logf.hpp"

#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>

#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task_group.hpp>

namespace cordma::detail::c_api {

namespace wire = link_wire;
// Calls read the clock once each: the coarse one, a few nanoseconds where
// a precise read costs a microsecond (core/coarse_clock.hpp).
using clock = coarse_clock;

namespace {

constexpr int largest_window = 60;

void check_config(const cordma_config& c) {
    auto bad = [](const std::string& what) { throw c_failure(EINVAL, "cordma_config." + what); };
    if (c.buffer_size < smallest_inline || c.buffer_size > largest_inline)
        bad("buffer_size is " + std::to_string(c.buffer_size) + " bytes; it must be 64 B to 1 MiB");
    if (c.window < 2 || c.window > largest_window)
        bad("window is " + std::to_string(c.window) + "; it must be 2 to " + std::to_string(largest_window));
    if (c.timeout_ms < 0)
        bad("timeout_ms is " + std::to_string(c.timeout_ms) + "; it must be 0 (no deadline) or positive");
    if (c.connect_timeout_ms <= 0)
        bad("connect_timeout_ms is " + std::to_string(c.connect_timeout_ms) + "; it must be positive");
    if (c.peer_timeout_ms < 1000)
        bad("peer_timeout_ms is " + std::to_string(c.peer_timeout_ms) + "; it must be at least 1000");
    if (c.port < 0 || c.port > 65535)
        bad("port is " + std::to_string(c.port) + "; it must be 0 to 65535");
    if (!c.listen && c.port != 0)
        bad("port is " + std::to_string(c.port) +
            " but listen is false: only a listening context has a port of its own (cordma_connect takes the "
            "peer's); set listen = true, or leave port 0");
    long long exchange = c_enum_value(c.exchange);
    if (exchange != CORDMA_EXCHANGE_RDMA_CM && exchange != CORDMA_EXCHANGE_TCP)
        bad("exchange is " + std::to_string(exchange) + "; it must be CORDMA_EXCHANGE_RDMA_CM or CORDMA_EXCHANGE_TCP");
    long long polling = c_enum_value(c.polling);
    if (polling != CORDMA_POLLING_EVENT && polling != CORDMA_POLLING_BUSY && polling != CORDMA_POLLING_YIELDING &&
        polling != CORDMA_POLLING_ADAPTIVE)
        bad("polling is " + std::to_string(polling) +
            "; it must be CORDMA_POLLING_EVENT, _BUSY, _YIELDING or _ADAPTIVE");
}

/// The name of the RDMA device whose interface has `address` (rdma_cm
/// binds an id to it and says which device that is).
std::string device_of(const std::string& address) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(address.c_str(), nullptr, &hints, &found); rc != 0)
        throw c_failure(EADDRNOTAVAIL, "cordma_config.address \"" + address + "\" does not resolve: " +
                                           ::gai_strerror(rc));
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, ::freeaddrinfo);
    rdma_cm_id* id = nullptr;
    if (::rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0)
        throw c_failure(errno, std::string("rdma_create_id failed: ") + std::strerror(errno) +
                                   " (is the rdma_cm module loaded? see `rdma link`)");
    std::unique_ptr<rdma_cm_id, int (*)(rdma_cm_id*)> id_guard(id, ::rdma_destroy_id);
    if (::rdma_bind_addr(id, found->ai_addr) != 0) {
        int e = errno;
        throw c_failure(EADDRNOTAVAIL, "cordma_config.address " + address +
                                           " is not an address of this host's RDMA interfaces (" + std::strerror(e) +
                                           "; `rdma link` lists the devices and their interfaces)");
    }
    if (id->verbs == nullptr)
        throw c_failure(EADDRNOTAVAIL, "cordma_config.address " + address +
                                           " is on no RDMA device (`rdma link` lists the devices and their interfaces)");
    return ::ibv_get_device_name(id->verbs->device);
}

std::string join_host_port(const std::string& host, int port) {
    if (host.find(':') != std::string::npos && host.front() != '[')
        return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

int port_of(const std::string& endpoint) {
    auto colon = endpoint.rfind(':');
    return colon == std::string::npos ? -1 : std::atoi(endpoint.c_str() + colon + 1);
}

void probe_peers(cordma_context& ctx, call_state& st, clock::time_point now) {
    bool starved = now - st.last_tick > 3 * tick_interval;
    st.last_tick = now;
    for (auto& p : ctx.peers) {
        if (!p->usable || !p->link)
            continue;
        if (starved)
            p->link->excuse_silence(now);
        p->link->probe(now, std::chrono::milliseconds(ctx.config.peer_timeout_ms));
    }
}

void on_watch(cordma_context* ctx);

/// When the watch must next fire: the call's next keepalive tick, or its
/// deadline if that comes first and has not passed yet.
clock::time_point next_wake(const call_state& st) {
    auto next = st.last_tick + tick_interval;
    if (st.timeout_ms > 0 && !st.timed_out)
        next = std::min(next, st.deadline);
    return next;
}

void arm_watch(cordma_context* ctx, clock::time_point at, clock::time_point now) {
    auto& st = ctx->call;
    st.watch_at = at;
    st.watch = ctx->listener_thread->call_after(at - now, [ctx] { on_watch(ctx); });
}

/// The watch's tick: the call's deadline, its keepalives, then the next
/// tick; nothing between calls (the next call re-arms it). Never runs
/// after the context's last call (cancelled there).
void on_watch(cordma_context* ctx) {
    auto& st = ctx->call;
    st.watch.reset();
    if (!st.active)
        return;
    auto now = clock::now();
    if (st.timeout_ms > 0 && !st.timed_out && now >= st.deadline) {
        st.timed_out = true;
        st.stop.request_stop();
    }
    if (now - st.last_tick >= tick_interval)
        probe_peers(*ctx, st, now);
    arm_watch(ctx, std::max(next_wake(st), now), now);
}

/// The hellos (link_hello.hpp), then the link they size: each side
/// receives inline up to its own buffer_size and sends inline up to the
/// peer's.
task<std::shared_ptr<peer_state>> open_peer(cordma_context* ctx, cordma::connection conn, std::string address,
                                            std::stop_token token, bool accepting,
                                            std::optional<receive_queue> posted = std::nullopt) {
    int index;
    {
        std::lock_guard lock(ctx->peers_mutex);
        index = static_cast<int>(ctx->peers.size());
    }
    auto peer = std::make_shared<peer_state>(index, address);
    peer->conn = conn;
    auto pool = ctx->builder.pool();
    link_terms mine{static_cast<std::uint32_t>(ctx->config.window), ctx->config.buffer_size};
    receive_queue queue = posted ? std::move(*posted)
                                 : receive_queue(conn, peer_link::receive_count(mine.window),
                                                 peer_link::first_frame_size(mine.inline_size), pool);
    link_terms theirs;
    try {
        theirs = co_await exchange_hello(conn, &queue, pool, c_api_hello_mark, mine,
                                         std::chrono::milliseconds(ctx->config.connect_timeout_ms), token, accepting);
    } catch (const std::system_error& e) {
        if (e.code() != std::errc::protocol_error)
            throw;
        throw c_failure(EPROTO, e.what());
    }
    peer->link = open_link(peer, index, peer->name, conn, std::move(queue), pool, mine, theirs);
    peer->link->start();
    {
        std::lock_guard lock(ctx->peers_mutex);
        peer->trace = ctx->trace;
        ctx->peers.push_back(peer);
    }
    co_return peer;
}

task<int> connect_task(cordma_context* ctx, std::string address) {
    cordma::builder b = ctx->builder;
    cordma::connection c = co_await b.connect(address);
    std::exception_ptr error;
    int index = -1;
    try {
        std::stop_token token = call_token(*ctx);
        std::shared_ptr<peer_state> p = co_await open_peer(ctx, c, address, token, false);
        index = p->index;
    } catch (...) {
        error = std::current_exception();
    }
    if (error) {
        co_await c.close();
        std::rethrow_exception(error);
    }
    co_return index;
}

task<int> accept_task(cordma_context* ctx) {
    for (;;) {
        std::stop_token token = call_token(*ctx);
        std::optional<arrival> a = co_await ctx->arrivals->take(token);
        if (!a)
            throw c_failure(EINVAL, "the context's listener is closed");
        cordma::connection c = a->conn;
        std::string who = c.peer();
        std::exception_ptr error;
        bool cancelled = false;
        int index = -1;
        try {
            std::shared_ptr<peer_state> p = co_await open_peer(ctx, c, who, token, true, std::move(a->queue));
            index = p->index;
        } catch (const operation_cancelled&) {
            cancelled = true;
            error = std::current_exception();
        } catch (const std::exception& e) {
            // Not a peer for this context: refuse it, wait for the next.
            detail::logf(log_level::warning, "cordma_accept: refused a connection from %s: %s", who.c_str(), e.what());
            error = std::current_exception();
        }
        if (!error)
            co_return index;
        co_await c.close();
        if (cancelled)
            std::rethrow_exception(error);
    }
}

/// Closes one peer: waits (within the call's deadline) for its frames to
/// leave, lets go of its grants and held frame, closes the connection.
task<int> close_peer(std::shared_ptr<peer_state> p, std::stop_token token) {
    p->disconnected = true;
    p->usable = false;
    if (p->link && !p->link->lost() && !p->conn.is_broken()) {
        try {
            co_await p->link->drain(token);
        } catch (const std::exception&) {
            // Past the deadline: close anyway (what is in flight is flushed).
        }
    }
    p->held.reset();
    p->grants.clear();
    co_await p->conn.close();
    if (p->link)
        p->link->close_queues();
    co_return 0;
}

task<int> destroy_task(cordma_context* ctx) {
    std::vector<std::shared_ptr<peer_state>> peers;
    {
        std::lock_guard lock(ctx->peers_mutex);
        peers = ctx->peers;
    }
    // No new client first: the background loop holds the listener open
    // until both close.
    if (ctx->incoming)
        ctx->incoming->close();
    if (ctx->arrivals)
        ctx->arrivals->close();
    std::stop_token token = call_token(*ctx);
    for (auto& p : peers)
        if (!p->disconnected)
            co_await close_peer(p, token);
    co_return 0;
}

}  // namespace

// ---- peers ----------------------------------------------------------------

void peer_state::fail(std::errc code, const std::string& why, int, bool tell_peers) {
    if (failure_)
        return;
    int errnum = (code == std::errc::protocol_error || code == std::errc::invalid_argument) ? EPROTO : ENOTCONN;
    failure_.emplace(errnum, why);
    usable = false;
    if (!link)
        return;
    if (tell_peers && !link->lost())
        link->send_abort(0xffffffffu, why);
    link->close_queues();
    // The connection goes too, once the abort has left (or 2 s passed):
    // a peer that broke the protocol, or went silent, loses only its own.
    if (disconnected)
        return;
    disconnected = true;
    held.reset();
    grants.clear();
    link->close_soon();
}

void peer_state::throw_failure() const {
    if (failure_)
        throw c_failure(failure_->first, failure_->second);
    throw c_failure(ENOTCONN, name + " is not connected");
}

void peer_state::check_usable() const {
    if (failure_)
        throw c_failure(failure_->first, "not connected since: " + failure_->second);
    if (disconnected || !usable)
        throw c_failure(ENOTCONN, "not connected: cordma_disconnect closed it");
}

void peer_state::fail_out_of_step(const std::string& call) {
    fail(std::errc::timed_out, call + " gave up halfway through an exchange with " + name +
                                   " (its deadline passed): the two sides are out of step, so the connection is closed",
         index, true);
}

namespace {

/// Peer `peer` of `ctx`, or c_failure EINVAL saying which peers there
/// are. Under ctx.peers_mutex.
const std::shared_ptr<peer_state>& peer_slot(cordma_context& ctx, int peer) {
    if (peer < 0 || static_cast<std::size_t>(peer) >= ctx.peers.size()) {
        std::string have = ctx.peers.empty() ? "this context has no peers yet (cordma_connect or cordma_accept first)"
                                             : "this context's peers are 0 to " + std::to_string(ctx.peers.size() - 1);
        throw c_failure(EINVAL, "no peer " + std::to_string(peer) + ": " + have);
    }
    return ctx.peers[static_cast<std::size_t>(peer)];
}

}  // namespace

peer_state& peer_at(cordma_context& ctx, int peer) {
    std::lock_guard lock(ctx.peers_mutex);
    return *peer_slot(ctx, peer);
}

cordma_context& checked_context(cordma_context* ctx) {
    if (ctx == nullptr)
        throw c_failure(EINVAL, "the context is NULL (cordma_create returned NULL? cordma_last_error says why)");
    return *ctx;
}

std::unique_lock<std::mutex> lock_call(cordma_context& ctx) {
    if (ctx.listener_thread->running_in_this_thread())
        throw c_failure(EDEADLK,
                        "called on the thread that runs this context's loop (from a log sink, during another call on "
                        "the context): it would wait for itself; make the call from another thread, or after the "
                        "call in progress returns");
    return std::unique_lock(ctx.call_mutex);
}

std::shared_ptr<peer_state> peer_handle(cordma_context& ctx, int peer) {
    std::lock_guard lock(ctx.peers_mutex);
    return peer_slot(ctx, peer);
}

std::vector<std::shared_ptr<peer_state>> connected_peers(cordma_context& ctx) {
    std::lock_guard lock(ctx.peers_mutex);
    std::vector<std::shared_ptr<peer_state>> out;
    for (auto& p : ctx.peers)
        if (p->usable)
            out.push_back(p);
    return out;
}

std::string subject_of(const cordma_context& ctx, int peer) {
    std::lock_guard lock(ctx.peers_mutex);
    if (peer >= 0 && static_cast<std::size_t>(peer) < ctx.peers.size())
        return "peer " + std::to_string(peer) + ", " + ctx.peers[static_cast<std::size_t>(peer)]->address;
    return "peer " + std::to_string(peer);
}

// ---- calls ----------------------------------------------------------------

std::stop_token call_token(cordma_context& ctx) {
    return ctx.call.active ? ctx.call.stop.get_token() : std::stop_token{};
}

void arm_call(cordma_context& ctx, int timeout_ms) {
    auto& st = ctx.call;
    st.active = true;
    st.timed_out = false;
    st.timeout_ms = timeout_ms;
    if (st.stop.stop_requested())
        st.stop = std::stop_source();
    // The call's one clock read: its first keepalive tick_interval from
    // now, as its deadline is timeout_ms from now.
    auto now = clock::now();
    st.last_tick = now;
    // The coarse clock may lag the precise one by its resolution: a
    // deadline that long later never passes early.
    st.deadline = now + std::chrono::milliseconds(timeout_ms) + clock::resolution();
    auto next = next_wake(st);
    // A watch still pending from an earlier call serves if it fires no
    // later than this call needs; only a sooner deadline arms another.
    if (!st.watch || st.watch_at > next) {
        if (st.watch)
            st.watch->cancel();
        arm_watch(&ctx, next, now);
    }
}

void disarm_call(cordma_context& ctx, bool last) noexcept {
    auto& st = ctx.call;
    st.active = false;
    if (last && st.watch) {
        st.watch->cancel();
        st.watch.reset();
    }
}

void rethrow_call_failure(cordma_context& ctx, const std::string& waiting_for) {
    try {
        throw;
    } catch (const c_failure&) {
        throw;
    } catch (...) {
        if (ctx.call.timed_out)
            throw c_failure(ETIMEDOUT, "timed out after " + std::to_string(ctx.call.timeout_ms) +
                                           " ms (cordma_config.timeout_ms) waiting for " + waiting_for);
        throw;
    }
}

}  // namespace cordma::detail::c_api

// ---- the C entry points ---------------------------------------------------

using namespace cordma::detail::c_api;


extern "C" {

void cordma_config_init(cordma_config* config) {
    if (config == nullptr)
        return;
    std::memset(config, 0, sizeof *config);
    config->address = nullptr;
    config->port = 0;
    config->listen = false;
    config->buffer_size = 4096;
    config->window = 16;
    config->timeout_ms = 0;
    config->connect_timeout_ms = 10000;
    config->peer_timeout_ms = 10000;
    config->exchange = CORDMA_EXCHANGE_RDMA_CM;
    config->polling = CORDMA_POLLING_EVENT;
}

cordma_context* cordma_create(const cordma_config* config) {
    return c_entry<cordma_context*>("cordma_create", "", nullptr, [&]() -> cordma_context* {
        if (config == nullptr)
            throw c_failure(EINVAL, "config is NULL: fill one with cordma_config_init and change what you need");
        check_config(*config);
        auto ctx = std::make_unique<cordma_context>();
        ctx->config = *config;
        if (config->address != nullptr)
            ctx->address = config->address;
        ctx->config.address = ctx->address.empty() ? nullptr : ctx->address.c_str();

        cordma::connection_settings s;
        if (!ctx->address.empty())
            s.device = device_of(ctx->address);
        s.capacity.max_recv_wr =
            std::max<std::uint32_t>(s.capacity.max_recv_wr, static_cast<std::uint32_t>(
                                                                 cordma::detail::peer_link::receive_count(config->window)));
        s.connect_timeout = std::chrono::milliseconds(config->connect_timeout_ms);
        s.agent.max_lease = c_grant_lease;
        s.exchange = config->exchange == CORDMA_EXCHANGE_TCP ? cordma::endpoint_exchange::tcp
                                                             : cordma::endpoint_exchange::rdma_cm;
        s.polling = config->polling == CORDMA_POLLING_BUSY       ? cordma::polling_mode::busy
                    : config->polling == CORDMA_POLLING_YIELDING ? cordma::polling_mode::yielding
                    : config->polling == CORDMA_POLLING_ADAPTIVE ? cordma::polling_mode::adaptive
                                                                 : cordma::polling_mode::event;
        ctx->builder = cordma::builder(s);
        cordma::detail::wait_for_receivers(ctx->builder);
        ctx->listener_thread = ctx->builder.event_listener();
        if (config->listen) {
            std::string host = ctx->address.empty() ? "0.0.0.0" : ctx->address;
            ctx->incoming = ctx->builder.listen(join_host_port(host, config->port));
            ctx->local_port = port_of(ctx->incoming->address());
            ctx->arrivals = arrivals::start(ctx->listener_thread, *ctx->incoming, ctx->builder.pool(),
                                            cordma::detail::peer_link::receive_count(static_cast<std::uint32_t>(config->window)),
                                            cordma::detail::peer_link::first_frame_size(config->buffer_size));
        }
        return ctx.release();
    });
}

void cordma_destroy(cordma_context* ctx) {
    if (ctx == nullptr)
        return;
    // Refused on the context's own loop (a log sink): nothing is freed,
    // since the thread doing it would be freed from under itself.
    bool refused = true;
    c_entry<int>("cordma_destroy", "", -1, [&] {
        auto lock = lock_call(*ctx);
        refused = false;
        // Bounded: frames still leaving get 5 s, then everything closes.
        return run_call(*ctx, [ctx] { return destroy_task(ctx); }, "frames in flight to leave", 5000, true);
    });
    if (refused)
        return;
    // Whatever destroy_task got to: the listener closes (thread-safe), and
    // with it the loop holding clients for cordma_accept.
    if (ctx->incoming)
        ctx->incoming->close();
    delete ctx;
}

int cordma_connect(cordma_context* ctx, const char* host, int port) {
    std::string subject = std::string(host ? host : "NULL") + ":" + std::to_string(port);
    return c_entry<int>("cordma_connect", subject, -1, [&] {
        auto& c = checked_context(ctx);
        if (host == nullptr || *host == '\0')
            throw c_failure(EINVAL, "host is NULL or empty");
        if (port <= 0 || port > 65535)
            throw c_failure(EINVAL, "port " + std::to_string(port) + " is not 1 to 65535");
        auto lock = lock_call(c);
        std::string address = join_host_port(host, port);
        return run_call(c, [&] { return connect_task(&c, address); }, "the connection to " + address);
    });
}

int cordma_accept(cordma_context* ctx) {
    return c_entry<int>("cordma_accept", "", -1, [&] {
        auto& c = checked_context(ctx);
        if (!c.incoming)
            throw c_failure(EINVAL, "the context does not listen: create it with cordma_config.listen = true");
        auto lock = lock_call(c);
        return run_call(c, [&] { return accept_task(&c); }, "a peer to connect");
    });
}

int cordma_disconnect(cordma_context* ctx, int peer) {
    return c_entry<int>("cordma_disconnect", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        auto lock = lock_call(c);
        std::shared_ptr<peer_state> p = peer_handle(c, peer);
        if (p->disconnected)
            return 0;
        return run_call(c, [&] { return close_peer(p, {}); }, "frames in flight to leave", 5000);
    });
}

int cordma_peer_count(const cordma_context* ctx) {
    if (ctx == nullptr)
        return -1;
    std::lock_guard lock(ctx->peers_mutex);
    return static_cast<int>(ctx->peers.size());
}

int cordma_peer_connected(const cordma_context* ctx, int peer) {
    if (ctx == nullptr)
        return -1;
    std::lock_guard lock(ctx->peers_mutex);
    if (peer < 0 || static_cast<std::size_t>(peer) >= ctx->peers.size())
        return -1;
    return ctx->peers[static_cast<std::size_t>(peer)]->usable ? 1 : 0;
}

const char* cordma_peer_address(const cordma_context* ctx, int peer) {
    if (ctx == nullptr)
        return nullptr;
    std::lock_guard lock(ctx->peers_mutex);
    if (peer < 0 || static_cast<std::size_t>(peer) >= ctx->peers.size())
        return nullptr;
    return ctx->peers[static_cast<std::size_t>(peer)]->address.c_str();
}

int cordma_local_port(const cordma_context* ctx) { return ctx == nullptr ? -1 : ctx->local_port; }

}  // extern "C"
