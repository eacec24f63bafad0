// connect_loopback: two connections (with agents) joined on one device.
#include <cordma/connection.hpp>

#include <sys/socket.h>

#include "connect/assemble.hpp"
#include "connect/qp_settings.hpp"

namespace cordma {

std::pair<connection, connection> connect_loopback(std::shared_ptr<event_listener> el,
                                                   const qp_capacity& capacity, qp_connect_options options,
                                                   std::shared_ptr<memory_pool> pool, agent_limits limits) {
    const auto& device = el->device();
    auto pd = pool ? pool->pd() : protection_domain::create(device);
    if (!pool)
        pool = memory_pool::create(pd);
    if (options.port == 0 || options.port == 1)
        options.port = device->first_active_port();
    options.gid_index = device->find_gid_index(options.port, AF_INET);
    // One send CQ and one receive CQ for all four QPs, as a builder's
    // runtime shares its pair among its connections: a busy event listener polls
    // two CQs per pass, not eight.
    const qp_capacity& control = detail::control_capacity;
    auto send_cq = el->create_cq(static_cast<int>(2 * (capacity.max_send_wr + control.max_send_wr)));
    auto recv_cq = el->create_cq(static_cast<int>(2 * (capacity.max_recv_wr + control.max_recv_wr)));
    auto make_pair = [&](const qp_capacity& cap) {
        auto make_qp = [&] { return queue_pair::create(pd, send_cq, recv_cq, cap); };
        auto a = make_qp();
        auto b = make_qp();
        a->connect(b->local_endpoint(options.port, options.gid_index), options);
        b->connect(a->local_endpoint(options.port, options.gid_index), options);
        return std::pair{a, b};
    };
    auto [a, b] = make_pair(capacity);
    // The agents' control channel: the same rules as every transport's.
    options = detail::control_qp_options(options);
    auto [ca, cb] = make_pair(detail::control_capacity);
    std::string name = device->name() + " loopback qpn ";
    auto join = [&](std::shared_ptr<queue_pair> qp, const queue_pair& other) {
        detail::connection_parts parts;
        parts.event_listener = el;
        parts.data = std::move(qp);
        parts.peer = name + std::to_string(other.qp_num());
        parts.agent_pool = pool;
        parts.limits = limits;
        return detail::assemble(std::move(parts));
    };
    connection first = join(a, *b);
    connection second = join(b, *a);
    el->post([first, second, ca = ca, cb = cb] {
        detail::attach_control(first, ca);
        detail::attach_control(second, cb);
    });
    return {first, second};
}

}  // namespace cordma
