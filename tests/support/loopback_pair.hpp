#pragma once
// Two connections joined to each other on the test device, built by hand
// from queue pairs on one PD and adopted (no agent, no rdma_cm): the
// fixture the engine's tests share (operations, doorbells, receive
// queues). connect_loopback is the same with an agent on each side.

#include <sys/socket.h>

#include <memory>
#include <utility>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/queue_pair.hpp>

namespace cordma::test {

/// {client, server}: QPs of `capacity` on `pd`, each with CQs of `el`
/// (made on the PD's device, which need not be the listener's own),
/// connected with `options` (port and GID index: that device's first
/// active port and its IPv4 GID). The client's peer is named "server" and
/// the server's "client", as errors name them.
inline std::pair<connection, connection> adopted_pair(const std::shared_ptr<event_listener>& el,
                                                      const std::shared_ptr<protection_domain>& pd,
                                                      qp_capacity capacity = {}, qp_connect_options options = {}) {
    auto make_qp = [&] {
        int entries = static_cast<int>(capacity.max_send_wr + capacity.max_recv_wr);
        return queue_pair::create(pd, el->create_cq(pd->device(), entries), el->create_cq(pd->device(), entries),
                                  capacity);
    };
    auto qa = make_qp();
    auto qb = make_qp();
    options.port = pd->device()->first_active_port();
    options.gid_index = pd->device()->find_gid_index(options.port, AF_INET);
    qa->connect(qb->local_endpoint(options.port, options.gid_index), options);
    qb->connect(qa->local_endpoint(options.port, options.gid_index), options);
    return {connection::adopt(el, qa, "server"), connection::adopt(el, qb, "client")};
}

}  // namespace cordma::test
