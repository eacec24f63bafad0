#include "connect/rdma_cm/cm_handshake.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "connect/backlog_refusal.hpp"
#include "connect/route_hint.hpp"
#include "engine/shared_receive_state.hpp"
#include "verbs/check.hpp"

namespace cordma::detail {

std::string peer_of(rdma_cm_id* id) {
    socket_address peer;
    const sockaddr* address = rdma_get_peer_addr(id);
    peer.length = address->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&peer.storage, address, peer.length);
    return peer.to_string();
}

void refuse(rdma_cm_id* id, cm_refusal::reason_type reason) noexcept {
    cm_refusal refusal;
    refusal.reason = reason;
    auto bytes = refusal.bytes();
    rdma_reject(id, bytes.data(), static_cast<std::uint8_t>(bytes.size()));
}

std::vector<std::byte> private_data_of(const cm_event_copy& event) {
    const auto* bytes = reinterpret_cast<const std::byte*>(event.private_data.data());
    return {bytes, bytes + event.private_data_len};
}

[[noreturn]] void throw_connect_failure(const std::string& peer, const char* step, const cm_event_copy* event,
                                        std::chrono::milliseconds limit, const socket_address* where) {
    if (event == nullptr)
        throw connect_error(std::make_error_code(std::errc::timed_out),
                                "connect to " + peer + ": timed out after " +
                                    std::to_string(limit.count() / 1000.0).substr(0, 4) + " s while " + step +
                                    " (builder::connect_timeout)");
    if (event->type == RDMA_CM_EVENT_REJECTED) {
        // A cordma listener whose builder::agent differs says so; that is
        // final, unlike nothing listening yet.
        auto refusal = cm_refusal::from(*event);
        if (refusal && refusal->reason == cm_refusal::backlog_full)
            throw backlog_full_error("connect to " + peer, refusal->backlog);
        if (refusal)
            throw connect_error(
                std::make_error_code(std::errc::protocol_not_supported),
                "connect to " + peer + ": refused: " +
                    (refusal->reason == cm_refusal::listener_without_agent
                         ? "the listener has builder::agent(false) (plain connections only) and this side has the "
                           "agent on; connect with builder::agent(false), or give the listener the agent"
                         : "the listener has the agent on and this side has builder::agent(false); connect with "
                           "the agent (builder::agent(true), the default), or listen with builder::agent(false)"));
    }
    if (event->type == RDMA_CM_EVENT_REJECTED)
        throw connect_error(std::make_error_code(std::errc::connection_refused),
                                "connect to " + peer + ": connection refused (nothing listening there, or the peer "
                                "rejected it; " + describe(*event) + ")");
    if (event->type == RDMA_CM_EVENT_UNREACHABLE || event->type == RDMA_CM_EVENT_ADDR_ERROR ||
        event->status == -ETIMEDOUT || event->status == -EHOSTUNREACH || event->status == -ENETUNREACH) {
        std::string hint = where != nullptr ? route_hint(*where) : std::string();
        throw connect_error(std::make_error_code(std::errc::host_unreachable),
                            "connect to " + peer + ": unreachable while " + step + " (" + describe(*event) + ")" +
                                (hint.empty() ? "" : ": " + hint));
    }
    throw connect_error(std::make_error_code(std::errc::connection_aborted),
                            "connect to " + peer + ": " + step + " failed: " + describe(*event));
}

namespace {

const qp_capacity& capacity_for(const connection_settings& settings, qp_role role) {
    return role == qp_role::control ? control_capacity : settings.capacity;
}

/// The data QP receives through builder::shared_receives; the agent's
/// control QP always has its own receives.
std::shared_ptr<shared_receive_state> shared_receives_for(const connection_settings& settings, qp_role role) {
    return role == qp_role::data ? settings.shared_receives : nullptr;
}

/// rdma_init_qp_attr for `state`: what the connection manager knows (path,
/// QPNs, PSNs, RDMA read depths), before cordma's own settings go on top.
std::pair<ibv_qp_attr, int> cm_attributes(rdma_cm_id* id, ibv_qp_state state, const std::string& peer) {
    ibv_qp_attr attr{};
    attr.qp_state = state;
    int mask = 0;
    check_minus_one(rdma_init_qp_attr(id, &attr, &mask), [&] {
        return "rdma_init_qp_attr(" + peer + ", state=" + std::to_string(static_cast<int>(state)) + ")";
    });
    return {attr, mask};
}

void check_device(const runtime& rt, rdma_cm_id* id, const std::string& peer) {
    if (id->verbs != rt.event_listener->device()->native_handle())
        throw connect_error(std::make_error_code(std::errc::address_not_available),
                                "connection with " + peer + ": the address is on device " +
                                    ibv_get_device_name(id->verbs->device) + ", but the builder uses " +
                                    rt.event_listener->device()->name() + "; set builder::device");
}

rdma_conn_param conn_param(const runtime& rt, const connection_settings& settings, const queue_pair& qp) {
    rdma_conn_param param{};
    const auto& attr = rt.event_listener->device()->attributes();
    param.responder_resources = static_cast<std::uint8_t>(std::min(attr.max_qp_rd_atom, 16));
    param.initiator_depth = static_cast<std::uint8_t>(std::min(attr.max_qp_init_rd_atom, 16));
    // Carried to the peer, which ignores them: each side sets its own QP's
    // retry counts from its own builder (qp_options).
    param.retry_count = settings.retry_count;
    param.rnr_retry_count = settings.rnr_retry;
    param.qp_num = qp.qp_num();
    return param;
}

ibv_mtu capped_mtu(const device_context& device, const qp_connect_options& options) {
    return std::min(options.mtu, device.query_port(options.port).active_mtu);
}

}  // namespace

task<cm_link> cm_connect_qp(std::shared_ptr<runtime> rt, const connection_settings& settings,
                            const socket_address& where, qp_role role, std::optional<cm_hello> hello,
                            std::chrono::steady_clock::time_point deadline, bool establish) {
    std::string peer = where.to_string();
    auto cm = cm_id::make(rt, nullptr, peer);
    auto left = [&] {
        return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          deadline - std::chrono::steady_clock::now()));
    };
    auto expect = [&](rdma_cm_event_type wanted, const char* step) -> task<cm_event_copy> {
        auto event = co_await cm->next_event(left());
        if (!event || event->type != wanted)
            throw_connect_failure(peer, step, event ? &*event : nullptr, settings.connect_timeout, &where);
        co_return *event;
    };
    // At most 2 s per attempt: a host that is still booting leaves a failed
    // neighbour entry that one long resolution may never retry; the caller
    // tries again (host_unreachable) until the connect deadline.
    auto attempt = std::min(left(), address_attempt);
    if (rdma_resolve_addr(cm->id(), nullptr, const_cast<sockaddr*>(where.get()), static_cast<int>(attempt.count())) !=
        0) {
        // No route at all fails at once, rather than in an event.
        int e = errno != 0 ? errno : EIO;
        if (e == ENETUNREACH || e == EHOSTUNREACH) {
            std::string hint = route_hint(where);
            throw connect_error(std::make_error_code(std::errc::host_unreachable),
                                "connect to " + peer + ": unreachable (rdma_resolve_addr: " + std::strerror(e) + ")" +
                                    (hint.empty() ? "" : ": " + hint));
        }
        throw_verbs_error(e, "rdma_resolve_addr(" + peer + ")");
    }
    co_await expect(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address");
    check_device(*rt, cm->id(), peer);
    check_minus_one(rdma_resolve_route(cm->id(), static_cast<int>(left().count())),
                    [&] { return "rdma_resolve_route(" + peer + ")"; });
    co_await expect(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route");

    const device_context& device = *rt->event_listener->device();
    qp_connect_options options =
        qp_options(settings, device, rdma_get_local_addr(cm->id()), cm->id()->port_num, role);
    auto qp = rt->create_qp(capacity_for(settings, role), shared_receives_for(settings, role));
    auto [init, init_mask] = cm_attributes(cm->id(), IBV_QPS_INIT, peer);
    qp->modify_to_init(options, init, init_mask);

    rdma_conn_param param = conn_param(*rt, settings, *qp);
    std::array<std::byte, cm_hello::size> hello_bytes{};
    if (hello) {
        hello->mtu = static_cast<std::uint8_t>(capped_mtu(device, options));
        hello_bytes = hello->bytes();
        param.private_data = hello_bytes.data();
        param.private_data_len = static_cast<std::uint8_t>(hello_bytes.size());
    } else if (!settings.private_data.empty()) {
        // A plain connection: the user's bytes, nothing of cordma's. The
        // MTU is the path's (rdma_init_qp_attr at RTR), capped by ours.
        param.private_data = settings.private_data.data();
        param.private_data_len = static_cast<std::uint8_t>(settings.private_data.size());
    }
    check_minus_one(rdma_connect(cm->id(), &param), [&] { return "rdma_connect(" + peer + ")"; });
    cm_event_copy response = co_await expect(RDMA_CM_EVENT_CONNECT_RESPONSE, "waiting for the peer to accept");
    std::vector<std::byte> peer_private_data;
    if (hello) {
        auto reply = cm_reply::from(response);
        if (!reply) {
            rdma_reject(cm->id(), nullptr, 0);
            throw connect_error(std::make_error_code(std::errc::protocol_not_supported),
                                    "connect to " + peer +
                                        ": the peer accepted without cordma's reply, so it is not a cordma listener "
                                        "(a plain rdma_cm server?) and cannot serve the agent; connect to it with "
                                        "builder::agent(false)");
        }
        options.mtu = std::min(options.mtu, static_cast<ibv_mtu>(reply->mtu));
    } else {
        peer_private_data = private_data_of(response);
    }
    auto [rtr, rtr_mask] = cm_attributes(cm->id(), IBV_QPS_RTR, peer);
    qp->modify_to_rtr(options, nullptr, rtr, rtr_mask);
    auto [rts, rts_mask] = cm_attributes(cm->id(), IBV_QPS_RTS, peer);
    qp->modify_to_rts(options, rts, rts_mask);
    if (establish)
        check_minus_one(rdma_establish(cm->id()), [&] { return "rdma_establish(" + peer + ")"; });
    co_return cm_link{std::move(cm), std::move(qp), std::move(peer_private_data)};
}

task<std::shared_ptr<queue_pair>> cm_accept_qp(std::shared_ptr<runtime> rt, const connection_settings& settings,
                                               std::shared_ptr<cm_id> cm, qp_role role,
                                               const std::optional<cm_hello>& hello) {
    std::string peer = cm->peer();
    std::shared_ptr<queue_pair> qp;
    try {
        check_device(*rt, cm->id(), peer);
        const device_context& device = *rt->event_listener->device();
        qp_connect_options options =
            qp_options(settings, device, rdma_get_local_addr(cm->id()), cm->id()->port_num, role);
        if (hello && hello->mtu != 0)
            options.mtu = std::min(options.mtu, static_cast<ibv_mtu>(hello->mtu));
        options.mtu = capped_mtu(device, options);
        qp = rt->create_qp(capacity_for(settings, role), shared_receives_for(settings, role));
        auto [init, init_mask] = cm_attributes(cm->id(), IBV_QPS_INIT, peer);
        qp->modify_to_init(options, init, init_mask);
        auto [rtr, rtr_mask] = cm_attributes(cm->id(), IBV_QPS_RTR, peer);
        qp->modify_to_rtr(options, nullptr, rtr, rtr_mask);
        auto [rts, rts_mask] = cm_attributes(cm->id(), IBV_QPS_RTS, peer);
        qp->modify_to_rts(options, rts, rts_mask);
        cm_reply reply;
        reply.mtu = static_cast<std::uint8_t>(options.mtu);
        auto reply_bytes = reply.bytes();
        rdma_conn_param param = conn_param(*rt, settings, *qp);
        if (hello) {
            param.private_data = reply_bytes.data();
            param.private_data_len = static_cast<std::uint8_t>(reply_bytes.size());
        } else if (!settings.private_data.empty()) {
            // A plain client: the user's bytes, nothing of cordma's.
            param.private_data = settings.private_data.data();
            param.private_data_len = static_cast<std::uint8_t>(settings.private_data.size());
        }
        check_minus_one(rdma_accept(cm->id(), &param), [&] { return "rdma_accept(" + peer + ")"; });
    } catch (...) {
        rdma_reject(cm->id(), nullptr, 0);
        throw;
    }
    auto event = co_await cm->next_event(settings.connect_timeout);
    if (!event || event->type != RDMA_CM_EVENT_ESTABLISHED)
        throw connect_error(std::make_error_code(event ? std::errc::connection_aborted : std::errc::timed_out),
                                "accept from " + peer + ": " +
                                    (event ? describe(*event) : "no answer within builder::connect_timeout"));
    co_return qp;
}

}  // namespace cordma::detail
