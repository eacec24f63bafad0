// shared_receive_state: the SRQ, its slots and buffers, the connections
// attached to it, and what happens to each completion of its receives.
#include "engine/shared_receive_state.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <system_error>

#include <cordma/device.hpp>
#include <cordma/error.hpp>
#include <cordma/protection_domain.hpp>
#include "engine/connection_registry.hpp"
#include "engine/connection_state.hpp"
#include "engine/event_listener_access.hpp"
#include "verbs/check.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

shared_receive_state::shared_receive_state(std::shared_ptr<cordma::event_listener> el,
                                           std::shared_ptr<protection_domain> pd, std::size_t count,
                                           std::size_t buffer_size)
    : message_queue_state(el, "shared_receive_queue",
                          "the connections of a shared_receive_queue on " + pd->device()->name()),
      pd_(std::move(pd)), buffer_size_(buffer_size),
      ends_(waiter_queue<ended_connection>::make(std::move(el))) {
    const std::string call = "shared_receive_queue(count=" + std::to_string(count) +
                             ", buffer_size=" + std::to_string(buffer_size) + ") on " + pd_->device()->name();
    const ibv_device_attr& attr = pd_->device()->attributes();
    if (attr.max_srq == 0)
        throw std::system_error(std::make_error_code(std::errc::function_not_supported),
                                call + ": the device has no shared receive queues (max_srq is 0); give each "
                                       "connection its own receives (a receive_queue) instead");
    if (count == 0 || buffer_size == 0)
        throw std::invalid_argument(call + ": count and buffer_size must both be at least 1");
    if (count > static_cast<std::size_t>(attr.max_srq_wr))
        throw std::invalid_argument(call + ": the device's SRQs hold at most " + std::to_string(attr.max_srq_wr) +
                                    " receives (max_srq_wr); use fewer buffers");
    std::size_t stride = (buffer_size + 63) / 64 * 64;
    if (buffer_size > std::numeric_limits<std::uint32_t>::max() ||
        stride > std::numeric_limits<std::size_t>::max() / count)
        throw std::invalid_argument(call + ": too large (a receive buffer holds at most 4 GiB - 1)");

    slots_ = std::vector<slot>(count);
    std::size_t chunk = std::max<std::size_t>(4096, (stride * count + 4095) / 4096 * 4096);
    buffers_ = memory_pool::create(pd_, access_flags::local_write, chunk)->allocate(stride * count, 64);
    for (std::size_t i = 0; i < count; ++i) {
        slot& s = slots_[i];
        s.on_complete = &shared_receive_state::on_complete;
        s.srq = this;
        s.receive = true;
        s.buffers[0] = buffers_.slice(i * stride, buffer_size);
        s.buffer_count = 1;
    }

    ibv_srq_init_attr init{};
    init.attr.max_wr = static_cast<std::uint32_t>(count);
    init.attr.max_sge = 1;
    errno = 0;
    srq_ = check_pointer(ibv_create_srq(pd_->native_handle(), &init), [&] {
        return "ibv_create_srq(device=" + pd_->device()->name() + ", max_wr=" + std::to_string(count) +
               ", max_sge=1)";
    });
    static std::atomic<std::uint64_t> made{0};
    id_ = made.fetch_add(1, std::memory_order_relaxed) + 1;
    // Until open() posts them, none is ready, and none has been used.
    fewest_now_ = count;
    fewest_ready_.set(fewest_now_);
    try {
        event_listener_access::connections(*event_listener()).add_receive_queue(this);  // last: nothing after it throws
    } catch (...) {
        ibv_destroy_srq(srq_);  // the destructor does not run for a constructor that throws
        throw;
    }
}

shared_receive_state::~shared_receive_state() {
    event_listener_access::connections(*event_listener()).remove_receive_queue(this);
    // Every QP attached is gone by now (each keeps the state alive), and
    // with them every receive that could still complete.
    if (srq_ != nullptr)
        ibv_destroy_srq(srq_);
    if (on_destroyed) {
        try {
            on_destroyed();
        } catch (...) {
        }
    }
}

void shared_receive_state::open() {
    attached_ = true;
    accepting_.store(true, std::memory_order_release);
    for (slot& s : slots_)
        post(&s);
    fewest_now_ = ready_now_;
    fewest_ready_.set(fewest_now_);
}

void shared_receive_state::post(slot* s) {
    const local_slice& b = s->buffers[0];
    ibv_sge sge{reinterpret_cast<std::uint64_t>(b.data()), static_cast<std::uint32_t>(b.size()), b.lkey()};
    ibv_recv_wr wr{};
    wr.wr_id = s->as_wr_id();
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_srq_recv(srq_, &wr, &bad);
    if (rc != 0)
        throw verbs_error(rc, "ibv_post_srq_recv(" + pd_->device()->name() + ")");
    tally_[op_kind::recv].posted.add();
    ready_.set(++ready_now_);
}

void shared_receive_state::close() noexcept {
    if (!attached_)
        return;
    attached_ = false;
    stop_accepting_connections();
    // Messages nobody took are dropped: their buffers stay unposted.
    while (pop_arrived() != nullptr) {
    }
    cancel_waiters();
    ends_->close();
}

void shared_receive_state::on_complete(completion_target* target, const ibv_wc& wc) noexcept {
    auto* s = static_cast<slot*>(target);
    s->srq->complete(s, wc);
}

void shared_receive_state::complete(slot* s, const ibv_wc& wc) noexcept {
    tally_.count_completion(wc.status);
    ready_.set(--ready_now_);
    if (ready_now_ < fewest_now_)
        fewest_ready_.set(fewest_now_ = ready_now_);
    if (wc.status == IBV_WC_SUCCESS) {
        if (!attached_) {
            tally_[op_kind::recv].failed.add();  // dropped: nobody will take it; the buffer stays unposted
            return;
        }
        tally_[op_kind::recv].completed.add();
        tally_[op_kind::recv].bytes.add(wc.byte_len);
        s->byte_len = wc.byte_len;
        s->has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
        s->received_imm = s->has_imm ? ntohl(wc.imm_data) : 0;
        s->source_qp = wc.qp_num;
        deliver(s);
        return;
    }
    // A receive a broken connection had taken (flushed), or one its
    // message did not fit: that connection goes, the buffer is posted
    // again for the others.
    tally_[op_kind::recv].failed.add();
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
        std::string why = std::string("a receive of its shared_receive_queue failed with ") +
                          ibv_wc_status_str(wc.status) + " (status " + std::to_string(static_cast<int>(wc.status)) +
                          (wc.status == IBV_WC_LOC_LEN_ERR || wc.status == IBV_WC_LOC_QP_OP_ERR
                               ? "): the peer sent a message longer than the queue's buffers (" +
                                     std::to_string(buffer_size_) + " bytes)" +
                                     (wc.status == IBV_WC_LOC_QP_OP_ERR ? ", as rxe reports it" : "")
                               : ")");
        std::shared_ptr<connection_state> sender;
        std::string peer;
        {
            std::lock_guard lock(attached_mutex_);
            auto it = attached_connections_.find(wc.qp_num);
            if (it != attached_connections_.end()) {
                sender = it->second.state.lock();
                peer = it->second.peer;
            } else {
                // Its connection is not set up yet: the peer sent before the
                // server had taken its last handshake message. Its QP is in
                // error already; the connection is shut down as it attaches.
                auto now = std::chrono::steady_clock::now();
                std::erase_if(failed_before_attach_,
                              [now](const auto& f) { return now - f.second.when > early_failure_memory; });
                if (failed_before_attach_.size() < 256)
                    failed_before_attach_[wc.qp_num] = early_failure{why, now};
            }
        }
        if (sender) {
            detail::logf(log_level::warning, "cordma: shared_receive_queue on %s: closing the connection to %s: %s",
                         pd_->device()->name().c_str(), peer.c_str(), why.c_str());
            sender->shut_down(why);
        } else {
            detail::logf(log_level::warning,
                         "cordma: shared_receive_queue on %s: the connection of QP %u, not accepted yet: %s; it is "
                         "closed once accepted",
                         pd_->device()->name().c_str(), wc.qp_num, why.c_str());
        }
    }
    release(s);
}

void shared_receive_state::release(work_slot* ws) noexcept {
    auto* s = static_cast<slot*>(ws);
    if (!attached_)
        return;
    try {
        post(s);
    } catch (const std::exception& e) {
        // A queue that silently shrank would be a trap: say why.
        detail::logf(log_level::error, "cordma: shared_receive_queue on %s: could not post a receive again: %s",
                     pd_->device()->name().c_str(), e.what());
    }
}

void shared_receive_state::attach(std::uint32_t qp_num, const std::string& peer,
                                  std::weak_ptr<connection_state> state) {
    std::string failed;
    {
        std::lock_guard lock(attached_mutex_);
        attached_connections_[qp_num] = attached{peer, state};
        if (auto it = failed_before_attach_.find(qp_num); it != failed_before_attach_.end()) {
            if (std::chrono::steady_clock::now() - it->second.when <= early_failure_memory)
                failed = it->second.why;
            failed_before_attach_.erase(it);
        }
    }
    if (failed.empty())
        return;
    // After the attaching connection has finished setting up, so its end
    // reaches ended() like any other.
    event_listener()->post([state, failed, peer, device = pd_->device()->name()] {
        if (auto s = state.lock()) {
            detail::logf(log_level::warning, "cordma: shared_receive_queue on %s: closing the connection to %s: %s",
                         device.c_str(), peer.c_str(), failed.c_str());
            s->shut_down(failed);
        }
    });
}

void shared_receive_state::detach(std::uint32_t qp_num) noexcept {
    std::lock_guard lock(attached_mutex_);
    attached_connections_.erase(qp_num);
}

std::size_t shared_receive_state::connections() const {
    std::lock_guard lock(attached_mutex_);
    return attached_connections_.size();
}

void shared_receive_state::on_broken(std::uint32_t qp_num, const std::string& peer, const std::string& why) noexcept {
    try {
        ends_->push(ended_connection{qp_num, peer, why});
    } catch (...) {
        // Out of memory: the end goes unreported; next() is unaffected.
    }
}

shared_receive_metrics shared_receive_state::metrics() const {
    shared_receive_metrics m;
    m.device = pd_->device()->name();
    m.id = id_;
    m.size = slots_.size();
    m.buffer_size = buffer_size_;
    m.connections = connections();
    m.ready = ready_.get();
    m.fewest_ready = fewest_ready_.get();
    m.counters = tally_.read();
    return m;
}

std::string shared_receive_state::peer_of(std::uint32_t qp_num) const {
    std::lock_guard lock(attached_mutex_);
    auto it = attached_connections_.find(qp_num);
    return it == attached_connections_.end() ? std::string() : it->second.peer;
}

}  // namespace cordma::detail
