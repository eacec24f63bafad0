#include <cordma/builder.hpp>

#include <mutex>
#include <stdexcept>

#include <cordma/address.hpp>
#include <cordma/listener.hpp>
#include <cordma/shared_receive_queue.hpp>

#include "connect/connect.hpp"
#include "connect/qp_settings.hpp"
#include "connect/ready_hook.hpp"
#include "connect/runtime.hpp"
#include "engine/shared_receive_state.hpp"

namespace cordma {

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

std::shared_ptr<event_listener> builder::event_listener() { return runtime()->event_listener; }
metrics_snapshot builder::metrics() const {
    std::shared_ptr<detail::runtime> rt;
    {
        std::lock_guard lock(shared_->mutex);
        rt = shared_->rt;
    }
    return rt ? rt->event_listener->metrics() : metrics_snapshot{};
}
void builder::reset_latency() {
    std::shared_ptr<detail::runtime> rt;
    {
        std::lock_guard lock(shared_->mutex);
        rt = shared_->rt;
    }
    if (rt)
        rt->event_listener->reset_latency();
}
stuck_report builder::stuck(std::size_t limit, std::chrono::milliseconds wait) const {
    std::shared_ptr<detail::runtime> rt;
    {
        std::lock_guard lock(shared_->mutex);
        rt = shared_->rt;
    }
    return rt ? rt->event_listener->stuck(limit, wait) : stuck_report{};
}
std::shared_ptr<memory_pool> builder::pool() { return runtime()->pool; }
std::shared_ptr<protection_domain> builder::pd() { return runtime()->pd; }

builder& builder::device(std::string name) { settings_.device = std::move(name); return *this; }
builder& builder::port(std::uint8_t port) { settings_.port = port; return *this; }
builder& builder::rails(std::vector<std::string> devices) {
    auto call = [&] {
        std::string text = "builder::rails({";
        for (std::size_t i = 0; i < devices.size(); ++i)
            text += (i ? ", \"" : "\"") + devices[i] + "\"";
        return text + "})";
    };
    detail::check_rail_names(devices, call());
    settings_.rails = std::move(devices);
    return *this;
}
builder& builder::stripe_threshold(std::size_t bytes) {
    if (bytes < 4096)
        throw std::invalid_argument("builder::stripe_threshold(" + std::to_string(bytes) +
                                    "): must be at least 4096 bytes");
    settings_.stripe_threshold = bytes;
    return *this;
}
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
builder& builder::remote_access(access_flags access) { settings_.remote_access = access; return *this; }
builder& builder::polling(polling_mode mode) { settings_.polling = mode; return *this; }
builder& builder::connect_timeout(std::chrono::milliseconds limit) {
    if (limit.count() <= 0)
        throw std::invalid_argument("builder::connect_timeout: must be positive");
    settings_.connect_timeout = limit;
    return *this;
}
builder& builder::backlog(std::size_t clients) {
    if (clients == 0 || clients > 65535)
        throw std::invalid_argument("builder::backlog: " + std::to_string(clients) +
                                    " clients; it must be 1 to 65535");
    settings_.backlog = clients;
    return *this;
}
builder& builder::exchange(endpoint_exchange how) { settings_.exchange = how; return *this; }
builder& builder::agent_limits(const cordma::agent_limits& limits) { settings_.agent = limits; return *this; }
builder& builder::agent(bool enabled) { settings_.with_agent = enabled; return *this; }
builder& builder::private_data(std::span<const std::byte> bytes) {
    if (bytes.size() > max_accept_private_data)
        throw std::invalid_argument("builder::private_data(" + std::to_string(bytes.size()) +
                                    " bytes): at most " + std::to_string(max_accept_private_data) +
                                    " (what an rdma_cm accept carries; a connect request carries " +
                                    std::to_string(max_connect_private_data) + ")");
    settings_.private_data.assign(bytes.begin(), bytes.end());
    return *this;
}
builder& builder::private_data(std::string_view bytes) {
    return private_data(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

builder& builder::shared_receives(const shared_receive_queue& queue) {
    settings_.shared_receives = queue ? detail::shared_receive_access::state(queue) : nullptr;
    return *this;
}

builder& builder::pool_chunk_size(std::size_t bytes) {
    if (bytes < 4096)
        throw std::invalid_argument("builder::pool_chunk_size(" + std::to_string(bytes) +
                                    "): must be at least 4096 (one page)");
    std::lock_guard lock(shared_->mutex);
    if (shared_->rt && bytes != settings_.pool_chunk_size)
        throw std::logic_error("builder::pool_chunk_size(" + std::to_string(bytes) +
                               "): the builder's pool already exists (made by the first connect, listen or pool()) "
                               "with chunks of " + std::to_string(settings_.pool_chunk_size) +
                               " bytes; set it before those");
    settings_.pool_chunk_size = bytes;
    return *this;
}

builder& builder::metrics_endpoint(std::string where) {
    std::lock_guard lock(shared_->mutex);
    if (shared_->rt && where != settings_.metrics_endpoint)
        throw std::logic_error("builder::metrics_endpoint(\"" + where +
                               "\"): the builder's shared pieces already exist (made by the first connect, listen or "
                               "pool()); set it before those");
    settings_.metrics_endpoint = std::move(where);
    return *this;
}

builder& builder::pool_initial_size(std::size_t bytes) {
    std::lock_guard lock(shared_->mutex);
    if (shared_->rt && bytes != settings_.pool_initial_size)
        throw std::logic_error("builder::pool_initial_size(" + std::to_string(bytes) +
                               "): the builder's pool already exists (made by the first connect, listen or pool()); "
                               "set it before those");
    settings_.pool_initial_size = bytes;
    return *this;
}

builder& builder::registration_cache_size(std::size_t bytes) {
    std::lock_guard lock(shared_->mutex);
    if (shared_->rt && bytes != settings_.registration_cache_size)
        throw std::logic_error("builder::registration_cache_size(" + std::to_string(bytes) +
                               "): the builder's shared pieces already exist (made by the first connect, listen, "
                               "pool() or local_registration()); set it before those");
    settings_.registration_cache_size = bytes;
    return *this;
}

local_slice builder::local_registration(std::span<std::byte> buffer) {
    if (buffer.empty())
        throw std::invalid_argument("builder::local_registration: the buffer is empty (" +
                                    std::string(buffer.data() == nullptr ? "null" : "0 bytes") + ")");
    return runtime()->registrations->local(buffer.data(), buffer.size());
}

registration_cache_stats builder::registration_stats() { return runtime()->registrations->stats(); }

builder& builder::agent_timeout(std::chrono::milliseconds limit) {
    if (limit.count() <= 0)
        throw std::invalid_argument("builder::agent_timeout(" + std::to_string(limit.count()) +
                                    " ms): must be positive (agent_call::forever for no deadline)");
    settings_.agent_timeout = limit;
    return *this;
}

task<connection> builder::connect(std::string address) {
    return detail::builder_access::connect(*this, std::move(address), {});
}

namespace detail {

task<connection> builder_access::connect(builder& b, std::string address, ready_hook hook) {
    // Parsing and name resolution happen here, on the caller's thread, so a
    // bad address throws before anything is created and DNS never blocks the
    // event listener thread.
    socket_address where = resolve(parse_address(address));
    const connection_settings& settings = b.settings_;
    check_handshake_settings(settings, handshake_side::connecting);
    if (hook && settings.with_agent)
        throw std::logic_error("cordma: a ready hook is for plain connections (builder::agent(false))");
    auto rt = b.runtime();
    // Refused here, before anything is set up.
    if (settings.shared_receives)
        rt->check_shared_receives(*settings.shared_receives, "connect");
    if (settings.exchange == endpoint_exchange::tcp)
        return connect_tcp(std::move(rt), settings, where, std::move(hook));
    return connect_rdma_cm(std::move(rt), settings, where, std::move(hook));
}

}  // namespace detail

listener builder::listen(std::string_view address) {
    socket_address where = resolve(parse_address(address, 0, true), true);
    detail::check_handshake_settings(settings_, detail::handshake_side::accepting);
    // Refused here: a listener would otherwise drop every client it accepts.
    if (settings_.shared_receives)
        runtime()->check_shared_receives(*settings_.shared_receives, "listen");
    if (settings_.exchange == endpoint_exchange::tcp)
        return detail::listen_tcp(runtime(), settings_, where);
    return detail::listen_rdma_cm(runtime(), settings_, where);
}

}  // namespace cordma
