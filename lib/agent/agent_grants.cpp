// The memory-region agent, what the peer's messages do: a request served
// from this side's pool within agent_limits (granted, or denied by name),
// this side's grants and their leases, and the regions held from the peer
// (granted to this side, released when dropped).
#include "agent/agent.hpp"

#include <algorithm>
#include <cstdint>
#include <system_error>
#include <type_traits>
#include <variant>

#include <cordma/error.hpp>

namespace cordma {

namespace detail {

namespace proto = agent_protocol;

namespace {

std::string size_text(std::size_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

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
                drop_grant(msg.region_id, false, grant_end::released);
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
                    drop_grant(id, false, grant_end::released);
            } else if constexpr (std::is_same_v<T, proto::revoke_mr>) {
                // The owner cut us off; accesses now fail with a remote access
                // error, and the region's drop need not tell the owner.
                tally_.revoked_by_peer.add();
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
        tally_.denied.add();
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
    // On each of the builder's rails too, so the peer's operations on the
    // grant are striped (docs/rails.md).
    const auto& rails = pool_->rail_pds();
    for (std::size_t rail = 1; rail < rails.size() && rail <= out.rail_rkeys.size(); ++rail) {
        g.rail_registrations.push_back(memory_region::register_memory(rails[rail], memory.data(), memory.size(),
                                                                      access | access_flags::local_write));
        out.rail_rkeys[rail - 1] = g.rail_registrations.back().rkey();
    }
    out.rails = static_cast<std::uint8_t>(1 + g.rail_registrations.size());
    std::uint64_t id = next_region_id_++;
    std::weak_ptr<agent> weak = weak_from_this();
    g.lease_timer = event_listener_->call_after(lease, [weak, id] {
        if (auto self = weak.lock())
            self->drop_grant(id, true, grant_end::expired);
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
    tally_.grants.add();
    tally_.set_granted(granted_bytes_, grants_.size());
    return id;
}

void agent::drop_grant(std::uint64_t region_id, bool tell_peer, grant_end why) noexcept {
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
    tally_.end(why);
    tally_.set_granted(granted_bytes_, grants_.size());
    if (tell_peer)
        send_detached(proto::revoke_mr{region_id});
}

remote_mr agent::to_region(const proto::grant_mr& g) {
    tally_.received.add();
    auto ended = std::make_shared<std::atomic<bool>>(false);
    held_[g.region_id] = ended;
    remote_slice where{g.address, g.length, g.rkey, static_cast<access_flags>(g.access) & remote_bits};
    where.rails = g.rails;
    for (std::size_t i = 0; i + 1 < g.rails; ++i)
        where.rail_rkeys[i] = g.rail_rkeys[i];
    return remote_mr(weak_from_this(), g.region_id, where,
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

}  // namespace detail

}  // namespace cordma
