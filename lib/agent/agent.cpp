#include "agent/agent.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <system_error>

#include <cordma/task_group.hpp>
#include "engine/connection_state.hpp"

namespace cordma {

namespace detail {

namespace proto = agent_protocol;

namespace {

constexpr int receive_depth = 8;
constexpr access_flags remote_bits = access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic;

std::exception_ptr gone(const std::string& peer, const std::string& why) {
    return std::make_exception_ptr(disconnected_error("agent", peer, why));
}

std::string size_text(std::size_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

agent::agent(std::shared_ptr<event_listener> listener, std::shared_ptr<memory_pool> pool, agent_limits limits,
             std::string peer)
    : pool_(std::move(pool)), limits_(limits), peer_(std::move(peer)),
      incoming_remote_(waiter_queue<remote_mr>::make(listener)),
      incoming_local_(waiter_queue<local_mr>::make(listener)) {}

agent::~agent() = default;

void agent::attach(connection control, std::weak_ptr<connection_state> data) {
    control_ = std::move(control);
    data_ = std::move(data);
    event_listener_ = control_.event_listener();
    attached_ = true;
    for (int i = 0; i < receive_depth; ++i) {
        auto self = shared_from_this();
        spawn_detached([](std::shared_ptr<agent> a, local_mr buffer) -> task<void> {
            co_await a->receive_loop(std::move(buffer));
        }(self, pool_->allocate(proto::max_message_size)),
                       [](std::exception_ptr) {});
    }
    while (!ready_waiters_.empty()) {
        auto w = ready_waiters_.front();
        ready_waiters_.pop_front();
        w->set(true);
    }
}

task<void> agent::ready() {
    if (dead_)
        std::rethrow_exception(gone(peer_, death_));
    if (attached_)
        co_return;
    auto w = std::make_shared<handoff<bool>>();
    ready_waiters_.push_back(w);
    co_await w->wait();
}

task<void> agent::receive_loop(local_mr buffer) {
    for (;;) {
        recv_result got;
        try {
            got = co_await control_.recv(buffer.all());
        } catch (const std::exception& e) {
            shut_down(std::string("control channel closed: ") + e.what());
            co_return;
        }
        try {
            handle(proto::decode({buffer.data(), got.length}));
        } catch (const std::exception& e) {
            // A peer that breaks the protocol loses the connection, and
            // nothing it sent is acted on.
            std::string why = std::string("agent protocol violation by ") + peer_ + ": " + e.what();
            if (auto data = data_.lock())
                data->shut_down(why);
            shut_down(why);
            co_return;
        }
    }
}

task<void> agent::send_message(proto::message m) {
    co_await ready();
    local_mr buffer = pool_->allocate(proto::max_message_size);
    std::size_t length = proto::encode(m, buffer.bytes());
    co_await control_.send(buffer.slice(0, length));
}

void agent::send_detached(proto::message m) {
    if (dead_ || !attached_)
        return;
    spawn_detached(send_message(std::move(m)), [](std::exception_ptr) {
        // The peer is gone; the connection's own shutdown reports that.
    });
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
            if constexpr (std::is_same_v<T, proto::request_mr>) {
                on_request(msg);
            } else if constexpr (std::is_same_v<T, proto::grant_mr> || std::is_same_v<T, proto::deny_mr>) {
                if constexpr (std::is_same_v<T, proto::grant_mr>) {
                    if (msg.request_id == 0) {
                        incoming_remote_->push(to_region(msg));
                        return;
                    }
                }
                auto it = requests_.find(msg.request_id);
                if (it == requests_.end())
                    throw proto::protocol_error("an answer to request " + std::to_string(msg.request_id) +
                                                ", which was never made");
                auto waiter = it->second;
                requests_.erase(it);
                waiter->set(msg);
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
                drop_grant(msg.region_id, false);
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
    if (!contains(limits_.allowed_access, access))
        return deny(std::errc::permission_denied, "access " + to_string(access) + " is not allowed (agent_limits::allowed_access, with builder::remote_access, is " +
                                                      to_string(limits_.allowed_access & remote_bits) + ")");
    try {
        // Never a previous user's bytes.
        local_mr memory = pool_->allocate_zeroed(m.size, m.alignment);
        proto::grant_mr g;
        g.request_id = m.request_id;
        add_grant(memory.all(), access, std::chrono::milliseconds(m.lease_ms), g);
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
        auto listener = event_listener_;
        if (!listener)
            return;
        listener->post([weak, region_id] {
            if (auto self = weak.lock()) {
                self->held_.erase(region_id);
                self->send_detached(proto::release_mr{region_id});
            }
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
    auto fail_all = [&](auto& waiters) {
        while (!waiters.empty()) {
            auto w = waiters.front();
            waiters.pop_front();
            w->fail(gone(peer_, why));
        }
    };
    fail_all(ready_waiters_);
    incoming_remote_->close_keeping_values();
    incoming_local_->close_keeping_values();
    auto requests = std::move(requests_);
    for (auto& [id, w] : requests)
        w->fail(gone(peer_, why));
    for (auto& [id, g] : grants_)
        if (g.lease_timer)
            g.lease_timer->cancel();
    grants_.clear();
    granted_bytes_ = 0;
    if (control_)
        control_.shut_down();
}

task<remote_mr> agent::request_remote_mr(std::size_t size, std::size_t alignment,
                                             std::chrono::milliseconds lease, access_flags access) {
    auto self = shared_from_this();
    if ((access & remote_bits) == access_flags::none)
        throw std::invalid_argument("request_remote_mr(size=" + std::to_string(size) + ") from " + peer_ +
                                    ": access must include remote_read, remote_write or remote_atomic");
    co_await ready();
    std::uint32_t id = next_request_id_++;
    if (next_request_id_ == 0)
        next_request_id_ = 1;  // 0 on the wire means "unsolicited"
    auto waiter = std::make_shared<handoff<proto::message>>();
    proto::request_mr req{id, size, static_cast<std::uint32_t>(alignment),
                          static_cast<std::uint32_t>(std::clamp<long long>(lease.count(), 0, UINT32_MAX)),
                          static_cast<std::uint32_t>(to_verbs(access & remote_bits))};
    requests_.emplace(id, waiter);
    try {
        co_await send_message(req);
    } catch (...) {
        requests_.erase(id);
        throw;
    }
    proto::message reply = co_await waiter->wait();
    if (auto* deny = std::get_if<proto::deny_mr>(&reply))
        throw std::system_error(std::make_error_code(static_cast<std::errc>(deny->code)),
                                "request_remote_mr(size=" + std::to_string(size) + ") from " + peer_ +
                                    ": refused: " + deny->reason);
    co_return to_region(std::get<proto::grant_mr>(reply));
}

task<void> agent::send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags access) {
    auto self = shared_from_this();
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
    co_await ready();
    proto::grant_mr g;
    std::uint64_t id = add_grant(std::move(region), granted, lease, g);
    try {
        co_await send_message(g);
    } catch (...) {
        drop_grant(id, false);
        throw;
    }
}

task<remote_mr> agent::receive_remote_mr() {
    auto self = shared_from_this();
    std::optional<remote_mr> r = co_await incoming_remote_->pop({}, "receive_remote_mr", peer_);
    if (!r)
        std::rethrow_exception(gone(peer_, death_));
    co_return std::move(*r);
}

task<void> agent::send_remote_mr(remote_mr region) {
    auto self = shared_from_this();
    if (!region)
        throw std::invalid_argument("send_remote_mr to " + peer_ + ": an empty remote_mr (moved from?)");
    if (region.expired())
        throw std::system_error(std::make_error_code(std::errc::timed_out),
                                "send_remote_mr to " + peer_ + ": region " + std::to_string(region.id()) +
                                    " cannot be handed back: the owner ended the grant (its lease expired, or it "
                                    "was revoked) and has freed it already; the connection is fine");
    std::uint64_t id = region.disown();
    held_.erase(id);
    co_await send_message(proto::return_mr{id});
}

task<local_mr> agent::receive_local_mr() {
    auto self = shared_from_this();
    std::optional<local_mr> r = co_await incoming_local_->pop({}, "receive_local_mr", peer_);
    if (!r)
        std::rethrow_exception(gone(peer_, death_));
    co_return std::move(*r);
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
