#include "agent/agent.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>
#include "agent/call_deadline.hpp"
#include "engine/connection_state.hpp"
#include "log/logf.hpp"

namespace cordma {

namespace detail {

namespace proto = agent_protocol;

namespace {

constexpr access_flags remote_bits = access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic;

std::string size_text(std::size_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

agent::agent(std::shared_ptr<event_listener> el, std::shared_ptr<memory_pool> pool, agent_limits limits,
             std::string peer, std::chrono::milliseconds call_timeout, std::shared_ptr<agent_ledger> ledger)
    : pool_(std::move(pool)), limits_(limits), peer_(std::move(peer)), peer_host_(agent_ledger::host_of(peer_)),
      call_timeout_(call_timeout), ledger_(ledger ? std::move(ledger) : std::make_shared<agent_ledger>()),
      event_listener_(el), ready_(waiter_queue<bool>::make(el)),
      slots_(waiter_queue<bool>::make(el)), incoming_remote_(waiter_queue<remote_mr>::make(el)),
      incoming_local_(waiter_queue<local_mr>::make(std::move(el))) {
    for (std::uint32_t i = 0; i < proto::window; ++i)
        slots_->push(true);
}

agent::~agent() = default;

std::exception_ptr agent::gone() const {
    return std::make_exception_ptr(disconnected_error("agent", peer_, death_));
}

void agent::attach(connection control, std::weak_ptr<connection_state> data) {
    control_ = std::move(control);
    data_ = std::move(data);
    attached_ = true;
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

std::chrono::milliseconds agent::clamp_lease(std::chrono::milliseconds requested) const {
    if (requested.count() <= 0)
        return limits_.default_lease;
    return std::min(requested, limits_.max_lease);
}

void agent::handle(const proto::message& m) {
    std::visit(
        [this](const auto& msg) {
            using T = std::decay_t<decltype(msg)>;
            if constexpr (std::is_same_v<T, proto::ack>) {
                // Only the header matters (on_frame).
            } else if constexpr (std::is_same_v<T, proto::request_mr>) {
                on_request(msg);
            } else if constexpr (std::is_same_v<T, proto::grant_mr> || std::is_same_v<T, proto::deny_mr>) {
                if constexpr (std::is_same_v<T, proto::grant_mr>) {
                    if (msg.request_id == 0) {
                        incoming_remote_->push(to_region(msg));
                        return;
                    }
                }
                auto it = requests_.find(msg.request_id);
                if (it == requests_.end()) {
                    if (abandoned_.erase(msg.request_id)) {
                        // Its caller gave up (deadline, stop): give the
                        // memory straight back.
                        if constexpr (std::is_same_v<T, proto::grant_mr>)
                            queue_release(msg.region_id);
                        return;
                    }
                    throw proto::protocol_error("an answer to request " + std::to_string(msg.request_id) +
                                                ", which was never made");
                }
                auto waiter = it->second;
                requests_.erase(it);
                waiter->push(proto::message(msg));
            } else if constexpr (std::is_same_v<T, proto::return_mr>) {
                auto it = grants_.find(msg.region_id);
                if (it == grants_.end()) {
                    // A hand-back that crossed the grant's end (lease expiry
                    // or revoke) on the wire: ordinary, the region is freed
                    // already. Only an id never granted is a violation.
                    if (msg.region_id != 0 && msg.region_id < next_region_id_)
                        return;
                    throw proto::protocol_error("return_mr of region " + std::to_string(msg.region_id) +
                                                ", which this side never granted");
                }
                local_mr back(it->second.memory.block());
                drop_grant(msg.region_id, false);
                incoming_local_->push(std::move(back));
            } else if constexpr (std::is_same_v<T, proto::release_mr>) {
                // Unknown ids are fine: the lease may have run out first.
                // An id this side never issued is not (ids are issued in
                // increasing order from 1): checked before acting on any.
                for (auto id : msg.region_ids)
                    if (id >= next_region_id_)
                        throw proto::protocol_error("release_mr of region " + std::to_string(id) +
                                                    ", which this side never granted");
                for (auto id : msg.region_ids)
                    drop_grant(id, false);
            } else if constexpr (std::is_same_v<T, proto::revoke_mr>) {
                // The owner cut us off; accesses now fail with a remote access
                // error, and the region's drop need not tell the owner.
                if (auto held = held_.find(msg.region_id); held != held_.end()) {
                    if (auto ended = held->second.lock())
                        ended->store(true, std::memory_order_release);
                    held_.erase(held);
                }
            }
        },
        m);
}

void agent::on_request(const proto::request_mr& m) {
    auto deny = [&](std::errc code, std::string reason) {
        // The reason may quote an exception: make it fit the wire's rules, or
        // encoding fails and the requester is never answered.
        send_detached(proto::deny_mr{m.request_id, static_cast<std::uint32_t>(code), proto::fit_reason(reason)});
    };
    access_flags access = static_cast<access_flags>(static_cast<int>(m.access));
    if (m.size > limits_.max_region_size)
        return deny(std::errc::value_too_large, "size " + size_text(m.size) + " exceeds the per-region limit of " +
                                                    size_text(limits_.max_region_size) + " (agent_limits::max_region_size)");
    if (granted_bytes_ + m.size > limits_.max_total_bytes)
        return deny(std::errc::no_buffer_space, "granting " + size_text(m.size) + " would exceed the total of " +
                                                    size_text(limits_.max_total_bytes) + " (agent_limits::max_total_bytes; " +
                                                    size_text(granted_bytes_) + " held now)");
    if (grants_.size() >= limits_.max_regions)
        return deny(std::errc::too_many_files_open, "the peer already holds " + std::to_string(grants_.size()) +
                                                        " regions (agent_limits::max_regions)");
    auto peer_holds = ledger_->held_by(peer_host_);
    if (peer_holds.bytes + m.size > limits_.max_peer_total_bytes)
        return deny(std::errc::no_buffer_space, "granting " + size_text(m.size) + " would exceed the " +
                                                    size_text(limits_.max_peer_total_bytes) + " one peer host may hold (agent_limits::max_peer_total_bytes; " +
                                                    peer_host_ + " holds " + size_text(peer_holds.bytes) + " over all its connections)");
    if (peer_holds.regions >= limits_.max_peer_regions)
        return deny(std::errc::too_many_files_open, "the peer host " + peer_host_ + " already holds " +
                                                        std::to_string(peer_holds.regions) +
                                                        " regions over all its connections (agent_limits::max_peer_regions)");
    // One rule for every grant (send_local_mr too): what was asked, narrowed
    // to what this side lets peers have; refused only when nothing is left.
    access_flags granted = access & limits_.allowed_access & remote_bits;
    if (granted == access_flags::none)
        return deny(std::errc::permission_denied, "none of access " + to_string(access) + " is allowed (agent_limits::allowed_access, with builder::remote_access, is " +
                                                      to_string(limits_.allowed_access & remote_bits) + ")");
    try {
        // Never a previous user's bytes.
        local_mr memory = pool_->allocate_zeroed(m.size, m.alignment);
        proto::grant_mr g;
        g.request_id = m.request_id;
        add_grant(memory.all(), granted, std::chrono::milliseconds(m.lease_ms), g);
        send_detached(g);
    } catch (const std::exception& e) {
        deny(std::errc::not_enough_memory, std::string("could not allocate or register: ") + e.what());
    }
}

std::uint64_t agent::add_grant(local_slice memory, access_flags access, std::chrono::milliseconds lease,
                               proto::grant_mr& out) {
    lease = clamp_lease(lease);
    grant g;
    g.registration = memory_region::register_memory(pool_->pd(), memory.data(), memory.size(),
                                                    access | access_flags::local_write);
    std::uint64_t id = next_region_id_++;
    std::weak_ptr<agent> weak = weak_from_this();
    g.lease_timer = event_listener_->call_after(lease, [weak, id] {
        if (auto self = weak.lock())
            self->drop_grant(id, true);
    });
    out.region_id = id;
    out.address = reinterpret_cast<std::uint64_t>(memory.data());
    out.length = memory.size();
    out.rkey = g.registration.rkey();
    out.lease_ms = static_cast<std::uint32_t>(lease.count());
    out.access = static_cast<std::uint32_t>(to_verbs(access & remote_bits));
    granted_bytes_ += memory.size();
    ledger_->add(peer_host_, memory.size());
    g.memory = std::move(memory);
    grants_.emplace(id, std::move(g));
    return id;
}

void agent::drop_grant(std::uint64_t region_id, bool tell_peer) noexcept {
    auto it = grants_.find(region_id);
    if (it == grants_.end())
        return;
    if (it->second.lease_timer)
        it->second.lease_timer->cancel();
    granted_bytes_ -= it->second.memory.size();
    ledger_->remove(peer_host_, it->second.memory.size());
    // Deregistering invalidates the rkey: a late access is a remote access
    // error at the peer, never a write into memory handed to someone else.
    grants_.erase(it);
    if (tell_peer)
        send_detached(proto::revoke_mr{region_id});
}

remote_mr agent::to_region(const proto::grant_mr& g) {
    auto ended = std::make_shared<std::atomic<bool>>(false);
    held_[g.region_id] = ended;
    return remote_mr(weak_from_this(), g.region_id,
                     remote_slice{g.address, g.length, g.rkey, static_cast<access_flags>(g.access) & remote_bits},
                         std::chrono::steady_clock::now() + std::chrono::milliseconds(g.lease_ms), std::move(ended));
}

void agent::release_held(std::uint64_t region_id) noexcept {
    try {
        std::weak_ptr<agent> weak = weak_from_this();
        event_listener_->post([weak, region_id] {
            auto self = weak.lock();
            // Nothing to tell an owner that ended the grant itself.
            if (self && self->held_.erase(region_id) && !self->dead_)
                self->queue_release(region_id);
        });
    } catch (...) {
        // Out of memory: the lease frees the region instead.
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
    }
    grants_.clear();
    granted_bytes_ = 0;
    if (control_)
        control_.shut_down();
}

task<remote_mr> agent::request_remote_mr(std::size_t size, std::size_t alignment, std::chrono::milliseconds lease,
                                         access_flags access, agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "request_remote_mr";
    std::string what = std::string(name) + "(size=" + std::to_string(size) + ")";
    if ((access & remote_bits) == access_flags::none)
        throw std::invalid_argument(what + " from " + peer_ +
                                    ": access must include remote_read, remote_write or remote_atomic");
    call_deadline deadline(*event_listener_, call, call_timeout_);
    co_await acquire_slot_within(deadline, name, "the request", "Nothing was sent; the connection stays up.");
    std::uint32_t id = next_request_id_++;
    if (next_request_id_ == 0)
        next_request_id_ = 1;  // 0 on the wire means "unsolicited"
    auto answer = waiter_queue<proto::message>::make(event_listener_);
    requests_.emplace(id, answer);
    proto::request_mr req{id, size, static_cast<std::uint32_t>(alignment),
                          static_cast<std::uint32_t>(std::clamp<long long>(lease.count(), 0, UINT32_MAX)),
                          static_cast<std::uint32_t>(to_verbs(access & remote_bits))};
    std::optional<proto::message> reply;
    std::stop_token token = deadline.token();
    try {
        co_await transmit(req);
        reply = co_await answer->pop(token, name, peer_);
    } catch (const operation_cancelled&) {
        requests_.erase(id);
        abandoned_.insert(id);
        deadline.fail(name, peer_, "waiting for the peer's answer",
                      "The connection stays up; a grant that arrives later is released at once.");
    } catch (...) {
        requests_.erase(id);
        throw;
    }
    if (!reply)
        std::rethrow_exception(gone());
    if (auto* deny = std::get_if<proto::deny_mr>(&*reply))
        throw std::system_error(std::make_error_code(static_cast<std::errc>(deny->code)),
                                what + " from " + peer_ + ": refused: " + deny->reason);
    co_return to_region(std::get<proto::grant_mr>(*reply));
}

task<void> agent::send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access,
                                agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "send_local_mr";
    if ((access & remote_bits) == access_flags::none)
        throw std::invalid_argument("send_local_mr to " + peer_ +
                                    ": access must include remote_read, remote_write or remote_atomic");
    // Never more than the region allows, nor than this side lets peers have.
    access_flags granted = access & region.block()->access & limits_.allowed_access & remote_bits;
    if (granted == access_flags::none)
        throw std::invalid_argument("send_local_mr to " + peer_ + ": nothing left to grant: asked " +
                                    to_string(access & remote_bits) + ", the region allows " +
                                    to_string(region.block()->access & remote_bits) +
                                    ", agent_limits::allowed_access (with builder::remote_access) allows " +
                                    to_string(limits_.allowed_access & remote_bits));
    call_deadline deadline(*event_listener_, call, call_timeout_);
    co_await acquire_slot_within(deadline, name, "the grant", "Nothing was granted; the connection stays up.");
    proto::grant_mr g;
    std::uint64_t id = add_grant(std::move(region), granted, lease, g);
    try {
        co_await transmit(g);
    } catch (...) {
        drop_grant(id, false);
        throw;
    }
}

template <class T>
task<T> agent::receive_within(waiter_queue<T>& queue, agent_call call, const char* name,
                              const char* waiting_for, const char* outcome) {
    auto self = shared_from_this();
    call_deadline deadline(*event_listener_, call, call_timeout_);
    std::stop_token token = deadline.token();
    std::optional<T> r;
    try {
        r = co_await queue.pop(token, name, peer_);
    } catch (const operation_cancelled&) {
        deadline.fail(name, peer_, waiting_for, outcome);
    }
    if (!r)
        std::rethrow_exception(gone());
    co_return std::move(*r);
}

task<void> agent::acquire_slot_within(const call_deadline& deadline, const char* name, const char* message,
                                      const char* outcome) {
    std::stop_token token = deadline.token();
    try {
        co_await acquire_slot(token, name);
    } catch (const operation_cancelled&) {
        deadline.fail(name, peer_,
                      std::string("waiting to send ") + message + " (the peer's agent has not read this side's last " +
                          std::to_string(proto::window) + " messages)",
                      outcome);
    }
}

task<remote_mr> agent::receive_remote_mr(agent_call call) {
    return receive_within(*incoming_remote_, call, "receive_remote_mr",
                          "waiting for the peer to grant a region (send_local_mr)",
                          "The connection stays up; a region that arrives later goes to the next receive_remote_mr.");
}

task<void> agent::send_remote_mr(remote_mr region, agent_call call) {
    auto self = shared_from_this();
    static constexpr const char* name = "send_remote_mr";
    if (!region)
        throw std::invalid_argument("send_remote_mr to " + peer_ + ": an empty remote_mr (moved from?)");
    call_deadline deadline(*event_listener_, call, call_timeout_);
    co_await acquire_slot_within(deadline, name, "the hand-back", "The region is released instead; the connection stays up.");
    if (region.expired()) {
        slots_->push(true);  // the slot goes unused
        throw std::system_error(std::make_error_code(std::errc::timed_out),
                                "send_remote_mr to " + peer_ + ": region " + std::to_string(region.id()) +
                                    " cannot be handed back: the owner ended the grant (its lease expired, or it "
                                    "was revoked) and has freed it already; the connection is fine");
    }
    std::uint64_t id = region.disown();
    held_.erase(id);
    co_await transmit(proto::return_mr{id});
}

task<local_mr> agent::receive_local_mr(agent_call call) {
    return receive_within(*incoming_local_, call, "receive_local_mr",
                          "waiting for the peer to hand a region back (send_remote_mr)",
                          "The connection stays up; a region that comes back later goes to the next receive_local_mr.");
}

task<std::size_t> agent::revoke(local_slice region) {
    auto self = shared_from_this();
    std::vector<std::uint64_t> ids;
    for (auto& [id, g] : grants_)
        if (g.memory.data() < region.data() + region.size() && region.data() < g.memory.data() + g.memory.size())
            ids.push_back(id);
    for (auto id : ids)
        drop_grant(id, true);
    co_return ids.size();
}

}  // namespace detail

}  // namespace cordma
