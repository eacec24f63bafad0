// The memory-region agent of one connection, its control channel: attached
// to the control queue pair, the receive loop and its frames, flow control
// (acknowledgements, send slots), sending, releases sent in batches, and
// the shut down that fails every waiter. What the peer's messages do is in
// agent_grants.cpp; this side's calls are in agent_calls.cpp.
#include "agent/agent.hpp"

#include <algorithm>
#include <cstdint>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>
#include "engine/connection_state.hpp"
#include "engine/peer_host.hpp"
#include "log/logf.hpp"

namespace cordma {

namespace detail {

namespace proto = agent_protocol;

agent::agent(std::shared_ptr<event_listener> el, std::shared_ptr<memory_pool> pool, agent_limits limits,
             std::string peer, std::chrono::milliseconds call_timeout, std::shared_ptr<agent_ledger> ledger)
    : pool_(std::move(pool)), limits_(limits), peer_(std::move(peer)), peer_host_(peer_host(peer_)),
      call_timeout_(call_timeout), ledger_(ledger ? std::move(ledger) : std::make_shared<agent_ledger>()),
      event_listener_(el), ready_(waiter_queue<bool>::make(el)),
      slots_(waiter_queue<bool>::make(el)), incoming_remote_(waiter_queue<remote_mr>::make(el)),
      incoming_local_(waiter_queue<local_mr>::make(std::move(el))) {
    for (std::uint32_t i = 0; i < proto::window; ++i)
        slots_->push(true);
    if (event_listener_) {
        turn_ms_ = event_listener_access::turn_ms(*event_listener_);
        pending_source_.emplace(event_listener_, &agent::collect_pending, this);
    }
}

agent::~agent() = default;

std::exception_ptr agent::gone() const {
    return std::make_exception_ptr(disconnected_error("agent", peer_, death_));
}

void agent::attach(connection control, std::weak_ptr<connection_state> data) {
    control_ = std::move(control);
    data_ = std::move(data);
    attached_ = true;
    connection_access::state(control_)->receives_are_standing();
    for (std::uint32_t i = 0; i < proto::receive_depth; ++i) {
        auto self = shared_from_this();
        spawn_detached([](std::shared_ptr<agent> a, local_mr buffer) -> task<void> {
            co_await a->receive_loop(std::move(buffer));
        }(self, pool_->allocate(proto::max_message_size)),
                       [](std::exception_ptr) {});
    }
    ready_->close();  // wakes the calls that came first
}

task<void> agent::ready(std::stop_token token, const char* call) {
    if (!attached_ && !dead_)
        co_await ready_->pop(std::move(token), call, peer_);
    if (dead_)
        std::rethrow_exception(gone());
}

task<void> agent::acquire_slot(std::stop_token token, const char* call) {
    co_await ready(token, call);
    // Not `if (!co_await ...)`: g++ 12 miscompiles a co_await in a condition.
    std::optional<bool> slot = co_await slots_->pop(std::move(token), call, peer_);
    if (!slot)
        std::rethrow_exception(gone());
}

task<void> agent::receive_loop(local_mr buffer) {
    for (;;) {
        recv_result got;
        std::string failed;
        bool overlong = false;
        try {
            got = co_await control_.recv(buffer.all());
        } catch (const work_completion_error& e) {
            failed = e.what();
            // Flushed: the control QP is closing. Any other failure of a
            // receive is the peer's message not fitting the buffer (rxe
            // says IBV_WC_LOC_QP_OP_ERR, other devices IBV_WC_LOC_LEN_ERR):
            // as much a violation as a malformed one.
            overlong = e.status() != IBV_WC_WR_FLUSH_ERR;
        } catch (const std::exception& e) {
            failed = e.what();
        }
        if (overlong) {
            violation("a message longer than the " + std::to_string(proto::max_message_size) +
                      "-byte receive buffers (" + failed + ")");
            co_return;
        }
        if (!failed.empty()) {
            shut_down("control channel closed: " + failed);
            co_return;
        }
        try {
            on_frame(proto::decode_frame({buffer.data(), got.length}));
        } catch (const std::exception& e) {
            // A peer that breaks the protocol loses the connection, and
            // nothing it sent is acted on.
            violation(e.what());
            co_return;
        }
        if (dead_)
            co_return;
    }
}

void agent::violation(const std::string& what) noexcept {
    if (dead_)
        return;
    std::string why = "agent protocol violation by " + peer_ + ": " + what;
    detail::logf(log_level::warning, "cordma: %s; closing the connection", why.c_str());
    if (auto data = data_.lock())
        data->shut_down(why);
    shut_down(why);
}

void agent::on_frame(const proto::frame& f) {
    acknowledged(f.acked);
    if (!proto::counted(f.body))
        return;
    handle(f.body);
    count_handled();
}

void agent::acknowledged(std::uint16_t acked) {
    // The header carries the low 16 bits of a count that never runs more
    // than `window` ahead of what this side has seen.
    std::uint64_t newly = static_cast<std::uint16_t>(acked - static_cast<std::uint16_t>(peer_acked_));
    if (newly > sent_ - peer_acked_)
        throw proto::protocol_error("agent message: acked " + std::to_string(acked) + " acknowledges " +
                                    std::to_string(newly) + " messages, but only " +
                                    std::to_string(sent_ - peer_acked_) + " are unacknowledged");
    peer_acked_ += newly;
    for (std::uint64_t i = 0; i < newly; ++i)
        slots_->push(true);
}

void agent::count_handled() {
    // A message counts as handled once its buffer is posted again, which
    // its receive loop does right after handle() returns, before anything
    // posted here runs: acknowledge then, never sooner.
    ++handled_pending_;
    if (std::exchange(count_scheduled_, true))
        return;
    std::weak_ptr<agent> weak = weak_from_this();
    event_listener_->post([weak] {
        auto self = weak.lock();
        if (!self)
            return;
        self->count_scheduled_ = false;
        self->handled_ += std::exchange(self->handled_pending_, 0);
        if (!self->dead_ && self->handled_ - self->acked_sent_ >= proto::ack_after)
            spawn_detached(self->transmit(proto::ack{}), [](std::exception_ptr) {});
    });
}

task<void> agent::transmit(proto::message m) {
    auto self = shared_from_this();
    if (dead_)
        std::rethrow_exception(gone());
    local_mr buffer = pool_->allocate(proto::max_message_size);
    std::size_t length = proto::encode(m, buffer.bytes(), static_cast<std::uint16_t>(handled_));
    acked_sent_ = handled_;
    if (proto::counted(m))
        ++sent_;
    co_await control_.send(buffer.slice(0, length));
}

void agent::send_detached(proto::message m) {
    if (dead_ || !attached_)
        return;
    spawn_detached([](std::shared_ptr<agent> self, proto::message m) -> task<void> {
        co_await self->acquire_slot({}, "agent");
        co_await self->transmit(std::move(m));
    }(shared_from_this(), std::move(m)),
                   [](std::exception_ptr) {
                       // The peer is gone; the connection's own shutdown reports that.
                   });
}

void agent::queue_release(std::uint64_t region_id) {
    pending_releases_.push_back(region_id);
    if (std::exchange(release_scheduled_, true))
        return;
    // Drops that come together (a vector of regions going out of scope)
    // leave as a few release_mr messages, not one each.
    std::weak_ptr<agent> weak = weak_from_this();
    event_listener_->post([weak] {
        if (auto self = weak.lock())
            self->flush_releases();
    });
}

void agent::flush_releases() {
    release_scheduled_ = false;
    auto ids = std::exchange(pending_releases_, {});
    for (std::size_t at = 0; at < ids.size(); at += proto::max_release_batch) {
        proto::release_mr m;
        auto end = std::min(ids.size(), at + proto::max_release_batch);
        m.region_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(end));
        send_detached(std::move(m));
    }
}


void agent::shut_down(const std::string& why) noexcept {
    if (dead_)
        return;
    dead_ = true;
    death_ = why;
    // Every waiting call wakes and finds the agent dead.
    ready_->close();
    slots_->close();
    incoming_remote_->close_keeping_values();
    incoming_local_->close_keeping_values();
    auto requests = std::move(requests_);
    for (auto& [id, w] : requests)
        w->close();
    for (auto& [id, g] : grants_) {
        if (g.lease_timer)
            g.lease_timer->cancel();
        ledger_->remove(peer_host_, g.memory.size());
        tally_.end(grant_end::closed);
    }
    grants_.clear();
    granted_bytes_ = 0;
    tally_.set_granted(0, 0);
    if (control_)
        control_.shut_down();
}

}  // namespace detail

}  // namespace cordma
