#include "connect/runtime.hpp"

#include "agent/agent_ledger.hpp"
#include "engine/shared_receive_state.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cordma::detail {

std::shared_ptr<runtime> make_runtime(const connection_settings& settings) {
    if (settings.pool_chunk_size < 4096)
        throw std::invalid_argument("connection_settings::pool_chunk_size=" + std::to_string(settings.pool_chunk_size) +
                                    ": must be at least 4096 (one page)");
    auto rt = std::make_shared<runtime>();
    rt->event_listener = event_listener::start(device_context::open(settings.device), {.mode = settings.polling});
    rt->pd = protection_domain::create(rt->event_listener->device());
    rt->pool = memory_pool::create(rt->pd, access_flags::all, settings.pool_chunk_size);
    if (settings.pool_initial_size != 0)
        rt->pool->reserve(settings.pool_initial_size);
    rt->ledger = std::make_shared<agent_ledger>();
    rt->send_cq = rt->event_listener->create_cq(settings.cq_size);
    rt->recv_cq = rt->event_listener->create_cq(settings.cq_size);
    return rt;
}

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

void runtime::reserve_receives(std::uint32_t entries) { reserve(qp_capacity{.max_send_wr = 0, .max_recv_wr = entries}); }

void runtime::release_receives(std::uint32_t entries) noexcept {
    release_from_any_thread(qp_capacity{.max_send_wr = 0, .max_recv_wr = entries});
}

void runtime::release_from_any_thread(const qp_capacity& room) noexcept {
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
    reserve(capacity);
    std::shared_ptr<queue_pair> qp;
    try {
        qp = queue_pair::create(pd, send_cq, recv_cq, capacity, srq ? srq->srq() : nullptr);
    } catch (...) {
        release(capacity);
        throw;
    }
    // The QP may be destroyed on any thread; the room goes back on the
    // event listener thread, where the counts live. The SRQ goes only
    // after the QP that receives through it.
    std::weak_ptr<runtime> owner = weak_from_this();
    auto* raw = qp.get();
    return std::shared_ptr<queue_pair>(raw, [qp = std::move(qp), owner, capacity, srq](queue_pair*) mutable {
        qp.reset();
        srq.reset();
        if (auto rt = owner.lock())
            rt->release_from_any_thread(capacity);
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
