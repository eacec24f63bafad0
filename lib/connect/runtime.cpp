#include "connect/runtime.hpp"

#include <cordma/error.hpp>

#include "agent/agent_ledger.hpp"
#include "connect/qp_settings.hpp"
#include "engine/metrics_endpoint_share.hpp"
#include "engine/shared_receive_state.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cordma::detail {

namespace {

// What connection_settings::registration_cache_size says: at most the
// setting, and at most a quarter of a finite locked-memory limit, so that
// idle kept registrations leave the rest of the limit to the pool and the
// program.
std::size_t registration_cache_capacity(const connection_settings& settings) {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return settings.registration_cache_size;
    return std::min<std::size_t>(settings.registration_cache_size, limit.rlim_cur / 4);
}

}  // namespace

std::shared_ptr<runtime> make_runtime(const connection_settings& settings) {
    if (settings.pool_chunk_size < 4096)
        throw std::invalid_argument("connection_settings::pool_chunk_size=" + std::to_string(settings.pool_chunk_size) +
                                    ": must be at least 4096 (one page)");
    if (!settings.rails.empty() && !settings.device.empty() && settings.device != settings.rails.front())
        throw std::invalid_argument("builder::device(\"" + settings.device + "\") with builder::rails: rail 0 is the "
                                    "builder's device, and rails name \"" + settings.rails.front() +
                                    "\" first; drop builder::device or name it first in builder::rails");
    if (!settings.rails.empty())
        check_rail_names(settings.rails, "connection_settings::rails");
    // A rail's device that cannot be opened is named as the rail it is.
    auto open_rail = [&](std::size_t index) {
        try {
            return device_context::open(settings.rails[index]);
        } catch (const verbs_error& e) {
            throw verbs_error(e.code(), "builder::rails: rail " + std::to_string(index) + ": " + e.what());
        }
    };
    auto rt = std::make_shared<runtime>();
    rt->event_listener = event_listener::start(settings.rails.empty() ? device_context::open(settings.device)
                                                                      : open_rail(0),
                                               {.mode = settings.polling});
    rt->pd = protection_domain::create(rt->event_listener->device());
    std::vector<std::shared_ptr<protection_domain>> pds{rt->pd};
    for (std::size_t i = 1; i < settings.rails.size(); ++i) {
        runtime::rail r;
        r.device = open_rail(i);
        if (r.device->first_active_port() == 0)
            throw std::invalid_argument("builder::rails: rail " + std::to_string(i) + "'s device " +
                                        settings.rails[i] + " has no ACTIVE port");
        r.pd = protection_domain::create(r.device);
        r.send_cqs = std::make_unique<cq_pool>(rt->event_listener, r.device, settings.cq_size, "send");
        r.recv_cqs = std::make_unique<cq_pool>(rt->event_listener, r.device, settings.cq_size, "receive");
        pds.push_back(r.pd);
        rt->rails.push_back(std::move(r));
    }
    rt->pool = memory_pool::create(pds, access_flags::all, settings.pool_chunk_size);
    if (settings.pool_initial_size != 0)
        rt->pool->reserve(settings.pool_initial_size);
    rt->results_pool = memory_pool::create(pds, access_flags::local_write, 64 << 10);
    // Each kept registration pins its pages once per rail: the bound on
    // pinned bytes stays registration_cache_capacity's.
    rt->registrations = std::make_unique<registration_cache>(pds, registration_cache_capacity(settings) / pds.size());
    rt->ledger = std::make_shared<agent_ledger>();
    if (!settings.metrics_endpoint.empty())
        rt->metrics = shared_metrics_endpoint(settings.metrics_endpoint);
    rt->send_cqs = std::make_unique<cq_pool>(rt->event_listener, rt->event_listener->device(), settings.cq_size, "send");
    rt->recv_cqs =
        std::make_unique<cq_pool>(rt->event_listener, rt->event_listener->device(), settings.cq_size, "receive");
    return rt;
}

void runtime::release(const cq_room& room) noexcept {
    cq_pool& sends = room.rail == 0 ? *send_cqs : *rails[room.rail - 1].send_cqs;
    cq_pool& receives = room.rail == 0 ? *recv_cqs : *rails[room.rail - 1].recv_cqs;
    sends.give_back(room.send_cq, room.send_entries);
    receives.give_back(room.recv_cq, room.recv_entries);
}

const std::shared_ptr<device_context>& runtime::rail_device(std::size_t index) const noexcept {
    return index == 0 ? event_listener->device() : rails[index - 1].device;
}

std::shared_ptr<queue_pair> runtime::create_rail_qp(std::size_t index, const qp_capacity& requested) {
    rail& r = rails.at(index - 1);
    // Only writes and reads go on rails 1..: no receive queue.
    qp_capacity capacity = requested;
    capacity.max_recv_wr = 0;
    capacity.max_recv_sge = 0;
    cq_room room{.rail = index, .send_entries = static_cast<int>(capacity.max_send_wr),
                 .recv_entries = static_cast<int>(capacity.max_recv_wr)};
    auto send_cq = r.send_cqs->take(room.send_entries);
    room.send_cq = send_cq.get();
    std::shared_ptr<queue_pair> qp;
    try {
        auto recv_cq = r.recv_cqs->take(room.recv_entries);
        room.recv_cq = recv_cq.get();
        qp = queue_pair::create(r.pd, send_cq, recv_cq, capacity);
    } catch (...) {
        release(room);
        throw;
    }
    std::weak_ptr<runtime> owner = weak_from_this();
    auto* raw = qp.get();
    return std::shared_ptr<queue_pair>(raw, [qp = std::move(qp), owner, room](queue_pair*) mutable {
        qp.reset();
        if (auto rt = owner.lock())
            rt->release_from_any_thread(room);
    });
}

std::shared_ptr<completion_queue> runtime::reserve_receives(std::uint32_t entries) {
    return recv_cqs->take(static_cast<int>(entries));
}

void runtime::release_receives(const completion_queue* cq, std::uint32_t entries) noexcept {
    release_from_any_thread(cq_room{.recv_cq = cq, .recv_entries = static_cast<int>(entries)});
}

void runtime::release_from_any_thread(const cq_room& room) noexcept {
    if (event_listener->running_in_this_thread()) {
        release(room);
        return;
    }
    try {
        event_listener->post([owner = weak_from_this(), room] {
            if (auto alive = owner.lock())
                alive->release(room);
        });
    } catch (...) {
        // Out of memory: the CQ keeps the room (it only grows too early).
    }
}

std::shared_ptr<queue_pair> runtime::create_qp(const qp_capacity& requested, std::shared_ptr<shared_receive_state> srq) {
    qp_capacity capacity = requested;
    if (srq) {
        // Checked at connect and listen too; the queue may have gone since.
        check_shared_receives(*srq, "setting up a connection");
        // Receives come from the SRQ (its room on the CQ is reserved).
        capacity.max_recv_wr = 0;
        capacity.max_recv_sge = 0;
    }
    cq_room room{.send_entries = static_cast<int>(capacity.max_send_wr)};
    auto send_cq = send_cqs->take(room.send_entries);
    room.send_cq = send_cq.get();
    std::shared_ptr<completion_queue> recv_cq;
    std::shared_ptr<queue_pair> qp;
    try {
        if (srq) {
            recv_cq = srq->receive_cq;
        } else {
            recv_cq = recv_cqs->take(static_cast<int>(capacity.max_recv_wr));
            room.recv_cq = recv_cq.get();
            room.recv_entries = static_cast<int>(capacity.max_recv_wr);
        }
        qp = queue_pair::create(pd, send_cq, recv_cq, capacity, srq ? srq->srq() : nullptr);
    } catch (...) {
        release(room);
        throw;
    }
    // The QP may be destroyed on any thread; the room goes back on the
    // event listener thread, where the counts live. The SRQ goes only
    // after the QP that receives through it.
    std::weak_ptr<runtime> owner = weak_from_this();
    auto* raw = qp.get();
    return std::shared_ptr<queue_pair>(raw, [qp = std::move(qp), owner, room, srq](queue_pair*) mutable {
        qp.reset();
        srq.reset();
        if (auto rt = owner.lock())
            rt->release_from_any_thread(room);
    });
}

void runtime::check_shared_receives(const shared_receive_state& srq, const char* when) const {
    if (!srq.open_for_connections())
        throw std::logic_error(std::string("builder::shared_receives, at ") + when +
                               ": the shared_receive_queue was destroyed; give the builder a live one, or an empty "
                               "one for connections with their own receives");
    if (srq.pd() != pd)
        throw std::invalid_argument(std::string("builder::shared_receives, at ") + when +
                                    ": the shared_receive_queue was made from another builder (another protection "
                                    "domain), so these connections cannot receive through it; make it from this "
                                    "builder");
}

}  // namespace cordma::detail
