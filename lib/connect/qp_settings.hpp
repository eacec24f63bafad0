#pragma once
/// The one translation of a builder's settings into queue-pair attributes,
/// used by every way cordma sets a connection up (rdma_cm connect and
/// accept, the TCP exchange, loopback, new_connection): each setting is
/// applied here or refused here, by name, for every transport alike.

#include <sys/socket.h>

#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/device.hpp>
#include <cordma/queue_pair.hpp>

namespace cordma::detail {

/// Which of a connection's two queue pairs.
enum class qp_role { data, control };

/// "rdma_cm", "tcp".
const char* to_string(endpoint_exchange how) noexcept;

/// The attributes `settings` ask for on `device`, for a connection whose
/// local address is `local` (its family, and for IPv4 the address itself,
/// pick the default GID). `cm_port` is the port rdma_cm bound the address
/// to (0 for other transports). Throws std::invalid_argument naming the
/// setting (builder::port, builder::gid_index) and the transport when a
/// setting cannot apply: a port that does not exist or is down, a port other
/// than the one rdma_cm bound, a GID index that is out of range, empty, not
/// RoCE v2 or of the other address family (listing the usable ones).
qp_connect_options qp_options(const connection_settings& settings, const device_context& device,
                              const sockaddr* local, std::uint8_t cm_port, qp_role role);

enum class handshake_side { connecting, accepting };

/// Throws std::invalid_argument naming `call` (builder::rails(...)) unless
/// `devices` are 2 to max_rails distinct, non-empty device names.
void check_rail_names(const std::vector<std::string>& devices, const std::string& call);

/// Refuses, by name, the settings of the handshake itself that cannot
/// apply, for either transport: builder::private_data with the agent on
/// (cordma's hello fills the private data) or longer than `side` can carry
/// (a connect request: 56 bytes), builder::agent_limits changed from its
/// default with builder::agent(false) (there is no agent to limit). Throws
/// std::invalid_argument.
void check_handshake_settings(const connection_settings& settings, handshake_side side);

/// What the agent may grant on a connection with these settings: its
/// agent_limits, with allowed_access narrowed to what the QP lets peers do
/// (builder::remote_access), so a grant never claims more than works.
agent_limits agent_limits_for(const connection_settings& settings);

/// A GID table entry fit for RoCE v2 connections of one address family.
struct usable_gid {
    int index;
    std::string text;  // "::ffff:10.77.0.1"
};
std::vector<usable_gid> usable_gids(const device_context& device, std::uint8_t port, int family);

/// The agent's control QP's options beside its data QP's (`data`), on
/// every transport: the agent only sends and receives, and re-posts each
/// receive as soon as its message is handled, so waiting out "receiver not
/// ready" is safe (rnr_retry 7, forever); peers may not touch memory
/// through it.
inline qp_connect_options control_qp_options(qp_connect_options data) noexcept {
    data.rnr_retry = 7;
    data.remote_access = access_flags::none;
    return data;
}

/// Sets `b` up for connections whose owner finds a dead peer itself (a
/// link's keepalive, its owner's peer_timeout, 10 s by default; the rpc
/// server's liveness read): a peer slow to post its receives (its process
/// stopped or starved of CPU, or a client whose receives are posted just
/// after the server's first frame) is waited for as long as it takes
/// (rnr_retry 7, "forever"), unless the builder set another count. 6
/// retries of 655 ms gave up on a peer stopped for 4 s; a host that is
/// gone sends no receiver-not-ready NAK at all, so the retry count still
/// finds it. Used by stream, group, the C API and the rpc server.
void wait_for_receivers(builder& b);

/// The agent's control QP: its flow control keeps at most a window of
/// messages and two acks unread at the peer (docs/agent-protocol.md), and
/// every receive is re-posted as soon as its message is handled.
inline constexpr qp_capacity control_capacity{.max_send_wr = 24, .max_recv_wr = 24, .max_send_sge = 1,
                                              .max_recv_sge = 1, .max_inline_data = 0};

}  // namespace cordma::detail
