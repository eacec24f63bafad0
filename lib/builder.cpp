#include <cordma/builder.hpp>

#include <mutex>
#include <random>
#include <stdexcept>
#include <system_error>

#include <cordma/address.hpp>
#include <cordma/listener.hpp>
#include <cordma/detail/agent.hpp>
#include <cordma/detail/check.hpp>
#include <cordma/detail/cm_hello.hpp>
#include <cordma/detail/cm_id.hpp>
#include <cordma/detail/connect.hpp>
#include <cordma/detail/runtime.hpp>

namespace cordma {

namespace detail {

void runtime::reserve(const qp_capacity& capacity) {
    auto grow = [](completion_queue& cq, int& in_use, std::uint32_t more) {
        in_use += static_cast<int>(more);
        if (in_use > cq.entries())
            cq.resize(std::max(in_use, cq.entries() * 2));
    };
    grow(*send_cq, send_entries_in_use, capacity.max_send_wr);
    grow(*recv_cq, recv_entries_in_use, capacity.max_recv_wr);
}

void runtime::release(const qp_capacity& capacity) noexcept {
    send_entries_in_use -= static_cast<int>(capacity.max_send_wr);
    recv_entries_in_use -= static_cast<int>(capacity.max_recv_wr);
}

std::shared_ptr<runtime> make_runtime(const connection_settings& settings) {
    auto rt = std::make_shared<runtime>();
    rt->listener = event_listener::start(device_context::open(settings.device), {.mode = settings.polling});
    rt->pd = protection_domain::create(rt->listener->device());
    rt->pool = memory_pool::create(rt->pd);
    rt->send_cq = rt->listener->create_cq(settings.cq_size);
    rt->recv_cq = rt->listener->create_cq(settings.cq_size);
    return rt;
}

rdma_conn_param connection_parameters(const runtime& rt, const connection_settings& settings) {
    rdma_conn_param param{};
    const auto& attr = rt.listener->device()->attributes();
    param.responder_resources = static_cast<std::uint8_t>(std::min(attr.max_qp_rd_atom, 16));
    param.initiator_depth = static_cast<std::uint8_t>(std::min(attr.max_qp_init_rd_atom, 16));
    param.retry_count = settings.retry_count;
    param.rnr_retry_count = settings.rnr_retry;
    return param;
}

[[noreturn]] void throw_connect_failure(const std::string& peer, const char* step, const cm_event_copy* event,
                                        std::chrono::milliseconds limit) {
    if (event == nullptr)
        throw std::system_error(std::make_error_code(std::errc::timed_out),
                                "connect to " + peer + ": timed out after " + std::to_string(limit.count() / 1000.0).substr(0, 4) +
                                    " s while " + step + " (builder::connect_timeout)");
    if (event->type == RDMA_CM_EVENT_REJECTED)
        throw std::system_error(std::make_error_code(std::errc::connection_refused),
                                "connect to " + peer + ": connection refused (nothing listening there, or the peer "
                                "rejected it; " + describe(*event) + ")");
    if (event->type == RDMA_CM_EVENT_UNREACHABLE || event->status == -ETIMEDOUT)
        throw std::system_error(std::make_error_code(std::errc::host_unreachable),
                                "connect to " + peer + ": unreachable while " + step + " (" + describe(*event) + ")");
    throw std::system_error(std::make_error_code(std::errc::connection_aborted),
                            "connect to " + peer + ": " + step + " failed: " + describe(*event));
}

connection make_connection(const std::shared_ptr<runtime>& rt, const connection_settings&,
                           const qp_capacity& capacity, std::shared_ptr<cm_id> cm) {
    auto q = queue_pair::adopt(rt->pd, rt->send_cq, rt->recv_cq, cm->release_qp(), capacity);
    auto state = std::make_shared<connection_state>(rt->listener, std::move(q), cm->peer());
    state->set_transport(std::move(cm));
    return connection::adopt_state(std::move(state));
}

namespace {

std::uint64_t random_token() {
    static thread_local std::mt19937_64 generator{std::random_device{}()};
    return generator() | 1;
}

}  // namespace

// One rdma_cm handshake: resolve, route, QP, connect with `hello`.
task<std::shared_ptr<cm_id>> cm_handshake(std::shared_ptr<runtime> rt, const connection_settings& settings,
                                         const socket_address& where, const qp_capacity& capacity, cm_hello hello) {
    std::string peer = where.to_string();
    auto cm = cm_id::make(rt, nullptr, peer);
    auto deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
    auto left = [&] {
        return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          deadline - std::chrono::steady_clock::now()));
    };
    auto expect = [&](rdma_cm_event_type wanted, const char* step) -> task<void> {
        auto event = co_await cm->next_event(left());
        if (!event || event->type != wanted)
            throw_connect_failure(peer, step, event ? &*event : nullptr, settings.connect_timeout);
    };
    int ms = static_cast<int>(left().count());
    detail::check_minus_one(rdma_resolve_addr(cm->id(), nullptr, const_cast<sockaddr*>(where.get()), ms),
                            [&] { return "rdma_resolve_addr(" + peer + ")"; });
    co_await expect(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address");
    detail::check_minus_one(rdma_resolve_route(cm->id(), static_cast<int>(left().count())),
                            [&] { return "rdma_resolve_route(" + peer + ")"; });
    co_await expect(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route");
    cm->create_qp(capacity);
    std::uint8_t timeout = settings.timeout;
    rdma_set_option(cm->id(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout);
    rdma_conn_param param = connection_parameters(*rt, settings);
    param.private_data = &hello;
    param.private_data_len = sizeof hello;
    if (hello.kind == cm_hello::control)
        param.rnr_retry_count = 7;
    detail::check_minus_one(rdma_connect(cm->id(), &param), [&] { return "rdma_connect(" + peer + ")"; });
    co_await expect(RDMA_CM_EVENT_ESTABLISHED, "waiting for the peer to accept");
    co_return cm;
}

task<connection> connect_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where) {
    co_await rt->listener->schedule();
    cm_hello hello;
    hello.token = random_token();
    auto data = co_await cm_handshake(rt, settings, where, settings.capacity, hello);
    connection conn = make_connection(rt, settings, settings.capacity, std::move(data));
    conn.state()->agent = std::make_shared<agent>(rt->pool, settings.agent, conn.peer());
    hello.kind = cm_hello::control;
    try {
        auto control_cm = co_await cm_handshake(rt, settings, where, control_capacity, hello);
        connection control = make_connection(rt, settings, control_capacity, std::move(control_cm));
        conn.state()->agent->attach(control, conn.state());
    } catch (...) {
        conn.state()->shut_down("the agent's control queue pair could not be connected");
        throw;
    }
    conn.state()->reopen = [rt, settings, where] { return connect_rdma_cm(rt, settings, where); };
    co_return conn;
}

}  // namespace detail

namespace detail {

struct builder_shared {
    std::mutex mutex;
    std::shared_ptr<runtime> rt;
};

}  // namespace detail

builder::builder() : builder(connection_settings{}) {}
builder::builder(connection_settings settings)
    : settings_(std::move(settings)), shared_(std::make_shared<detail::builder_shared>()) {}

std::shared_ptr<detail::runtime> builder::runtime() {
    auto* shared = shared_.get();
    std::lock_guard lock(shared->mutex);
    if (!shared->rt)
        shared->rt = detail::make_runtime(settings_);
    return shared->rt;
}

std::shared_ptr<event_listener> builder::event_loop() { return runtime()->listener; }
std::shared_ptr<memory_pool> builder::pool() { return runtime()->pool; }
std::shared_ptr<protection_domain> builder::pd() { return runtime()->pd; }

builder& builder::device(std::string name) { settings_.device = std::move(name); return *this; }
builder& builder::port(std::uint8_t port) { settings_.port = port; return *this; }
builder& builder::gid_index(int index) { settings_.gid_index = index; return *this; }
builder& builder::cq_size(int entries) {
    if (entries < 1)
        throw std::invalid_argument("builder::cq_size(" + std::to_string(entries) + "): must be at least 1");
    settings_.cq_size = entries;
    return *this;
}
builder& builder::send_queue_depth(std::uint32_t depth) {
    if (depth < 1)
        throw std::invalid_argument("builder::send_queue_depth(0): must be at least 1");
    settings_.capacity.max_send_wr = depth;
    return *this;
}
builder& builder::recv_queue_depth(std::uint32_t depth) {
    if (depth < 1)
        throw std::invalid_argument("builder::recv_queue_depth(0): must be at least 1");
    settings_.capacity.max_recv_wr = depth;
    return *this;
}
builder& builder::max_sge(std::uint32_t sges) {
    if (sges < 1 || sges > detail::max_sges)
        throw std::invalid_argument("builder::max_sge(" + std::to_string(sges) + "): must be 1.." +
                                    std::to_string(detail::max_sges));
    settings_.capacity.max_send_sge = settings_.capacity.max_recv_sge = sges;
    return *this;
}
builder& builder::max_inline_data(std::uint32_t bytes) { settings_.capacity.max_inline_data = bytes; return *this; }
builder& builder::path_mtu(ibv_mtu mtu) { settings_.path_mtu = mtu; return *this; }
builder& builder::timeout(std::uint8_t code) {
    if (code > 31)
        throw std::invalid_argument("builder::timeout(" + std::to_string(code) + "): the ACK timeout code is 0..31");
    settings_.timeout = code;
    return *this;
}
builder& builder::retry_count(std::uint8_t count) {
    if (count > 7)
        throw std::invalid_argument("builder::retry_count(" + std::to_string(count) + "): must be 0..7");
    settings_.retry_count = count;
    return *this;
}
builder& builder::rnr_retry(std::uint8_t count) {
    if (count > 7)
        throw std::invalid_argument("builder::rnr_retry(" + std::to_string(count) + "): must be 0..7 (7 = forever)");
    settings_.rnr_retry = count;
    return *this;
}
builder& builder::min_rnr_timer(std::uint8_t code) {
    if (code > 31)
        throw std::invalid_argument("builder::min_rnr_timer(" + std::to_string(code) + "): the code is 0..31");
    settings_.min_rnr_timer = code;
    return *this;
}
builder& builder::remote_access(access_flags rights) { settings_.remote_access = rights; return *this; }
builder& builder::polling(polling_mode mode) { settings_.polling = mode; return *this; }
builder& builder::connect_timeout(std::chrono::milliseconds limit) {
    if (limit.count() <= 0)
        throw std::invalid_argument("builder::connect_timeout: must be positive");
    settings_.connect_timeout = limit;
    return *this;
}
builder& builder::exchange(endpoint_exchange how) { settings_.exchange = how; return *this; }
builder& builder::agent_limits(const cordma::agent_limits& limits) { settings_.agent = limits; return *this; }

task<connection> builder::connect(std::string address) {
    // Parsing and name resolution happen here, on the caller's thread, so a
    // bad address throws before anything is created and DNS never blocks the
    // listener thread.
    socket_address where = resolve(parse_address(address));
    auto rt = runtime();
    if (settings_.exchange == endpoint_exchange::tcp)
        return detail::connect_tcp(std::move(rt), settings_, where);
    return detail::connect_rdma_cm(std::move(rt), settings_, where);
}

}  // namespace cordma
