#pragma once
/// \file
/// A reliable-connected queue pair (ibv_qp, IBV_QPT_RC) and the endpoint
/// description peers exchange to connect two of them by hand.

#include <cordma/export.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include <infiniband/verbs.h>

#include <cordma/access.hpp>
#include <cordma/completion_queue.hpp>
#include <cordma/protection_domain.hpp>

namespace cordma {

/// How many work requests and scatter/gather entries a QP can hold.
///
/// The depths are 127, not 128: software RDMA (rxe) sizes a queue of n
/// work requests to the power of two above n, so 128 would allocate 256
/// slots and double what creating each QP costs (0.44 ms against 0.90 ms
/// measured by bench/storm/qp_create_cost in the VM; the connection storm
/// is bound by it). Hardware that rounds to the power of two at or above
/// n (mlx5) makes 127 and 128 the same size.
struct CORDMA_API qp_capacity {
    /// Work requests the send queue holds (operations in flight at once;
    /// more wait in cordma's FIFO for room).
    std::uint32_t max_send_wr = 127;
    /// Receives the receive queue holds.
    std::uint32_t max_recv_wr = 127;
    /// Slices one send, write or read may gather or scatter.
    std::uint32_t max_send_sge = 4;
    /// Slices one receive may scatter into.
    std::uint32_t max_recv_sge = 4;
    /// Largest send or write copied into its work request instead of read
    /// from its buffer by the device (0: never inline).
    std::uint32_t max_inline_data = 64;
};

/// What one side tells the other to connect a QP without rdma_cm.
struct CORDMA_API qp_endpoint {
    /// The queue pair number.
    std::uint32_t qpn = 0;
    /// The first packet sequence number its send queue uses.
    std::uint32_t psn = 0;
    /// Its port's GID at the chosen index (RoCE: derived from an IP address).
    ibv_gid gid{};
    /// Its port's LID (InfiniBand; 0 on RoCE, which routes by GID).
    std::uint16_t lid = 0;
};

/// The reliability settings of every cordma queue pair unless told
/// otherwise, whichever way it is connected (a builder's
/// connection_settings over rdma_cm or TCP, connect_loopback, a
/// qp_connect_options of one's own): the numbers live here once, and
/// builder.hpp's connection_settings says what each means and why it is
/// the default.
namespace qp_defaults {
/// Local ACK timeout code: 4.096 us * 2^14, about 67 ms.
inline constexpr std::uint8_t timeout = 14;
/// Retransmissions; 7 means "forever" on rxe.
inline constexpr std::uint8_t retry_count = 6;
/// Receiver-not-ready retries; 7 means "forever".
inline constexpr std::uint8_t rnr_retry = 6;
/// The RNR NAK timer code a peer waits before retrying this side: 0 is
/// 655 ms, the longest the IB encoding has (12 is 0.64 ms).
inline constexpr std::uint8_t min_rnr_timer = 0;
}  // namespace qp_defaults

/// Path and reliability settings used when a QP moves to RTR and RTS.
struct CORDMA_API qp_connect_options {
    /// The device port the QP uses (from 1).
    std::uint8_t port = 1;
    /// The index of the local GID in the port's table: on RoCE it picks the
    /// address and the RoCE version (v1 or v2) packets carry.
    int gid_index = 0;
    /// Upper bound; the port's active MTU is used if smaller.
    ibv_mtu mtu = IBV_MTU_4096;
    /// Local ACK timeout: 4.096 us * 2^timeout. The reliability fields
    /// default to qp_defaults, as a builder's do (builder.hpp explains them).
    std::uint8_t timeout = qp_defaults::timeout;
    /// Transport retries.
    std::uint8_t retry_count = qp_defaults::retry_count;
    /// Receiver-not-ready retries of this side's sends.
    std::uint8_t rnr_retry = qp_defaults::rnr_retry;
    /// Minimum RNR NAK timer code this side asks its peer to wait.
    std::uint8_t min_rnr_timer = qp_defaults::min_rnr_timer;
    /// RDMA reads and atomics in flight at once, each way (capped by what
    /// the device allows).
    std::uint8_t max_rd_atomic = 16;
    /// What the peer may do to memory through this QP.
    access_flags remote_access = access_flags::remote_write | access_flags::remote_read | access_flags::remote_atomic;
};

/// An RC queue pair (ibv_qp): the verbs object a connection posts its work
/// requests to. Shared: the connection, and anything else that holds it,
/// keep it alive; it is destroyed (ibv_destroy_qp) with the last reference
/// and keeps its PD and CQs alive until then. Not thread-safe: a connection
/// posts to its QP from the event listener thread only, and so must anyone
/// posting to a connection's QP directly.
class CORDMA_API queue_pair {
public:
    /// Creates an RC QP in state RESET. It keeps `pd` and both CQs alive.
    /// With `srq`, it receives through that shared receive queue (and has
    /// no receive queue of its own); the caller keeps the SRQ alive longer
    /// than the QP.
    static std::shared_ptr<queue_pair> create(std::shared_ptr<protection_domain> pd,
                                              std::shared_ptr<completion_queue> send_cq,
                                              std::shared_ptr<completion_queue> recv_cq,
                                              const qp_capacity& capacity = {}, ibv_srq* srq = nullptr);

    /// Takes ownership of a QP made elsewhere (rdma_create_qp) on `pd` with
    /// these CQs; it is destroyed with ibv_destroy_qp.
    static std::shared_ptr<queue_pair> adopt(std::shared_ptr<protection_domain> pd,
                                             std::shared_ptr<completion_queue> send_cq,
                                             std::shared_ptr<completion_queue> recv_cq, ibv_qp* qp,
                                             const qp_capacity& capacity);

    /// The creation attributes of an RC QP with these CQs and capacity: what
    /// create() uses, and what rdma_create_qp is given for cordma's QPs.
    static ibv_qp_init_attr rc_attributes(const completion_queue& send_cq, const completion_queue& recv_cq,
                                          const qp_capacity& capacity) noexcept;

    ~queue_pair();
    queue_pair(const queue_pair&) = delete;
    queue_pair& operator=(const queue_pair&) = delete;

    /// The libibverbs QP (for ibv_query_qp and friends), owned by this
    /// object, valid while it lives.
    ibv_qp* native_handle() const noexcept { return qp_; }
    /// Its queue pair number, which the peer connects to.
    std::uint32_t qp_num() const noexcept { return qp_->qp_num; }
    /// The capacity it was created with.
    const qp_capacity& capacity() const noexcept { return capacity_; }
    /// Its protection domain.
    const std::shared_ptr<protection_domain>& pd() const noexcept { return pd_; }
    /// The CQ its sends, writes, reads and atomics complete on.
    const std::shared_ptr<completion_queue>& send_cq() const noexcept { return send_cq_; }
    /// The CQ its receives complete on.
    const std::shared_ptr<completion_queue>& recv_cq() const noexcept { return recv_cq_; }
    /// The shared receive queue it receives through, or nullptr.
    ibv_srq* srq() const noexcept { return srq_; }

    /// This QP's endpoint on `port` with the GID at `gid_index`, and its
    /// initial send PSN (random, chosen at creation).
    qp_endpoint local_endpoint(std::uint8_t port, int gid_index) const;

    /// RESET -> INIT -> RTR -> RTS towards `remote`. Throws verbs_error naming
    /// the transition and the attribute values that were refused.
    void connect(const qp_endpoint& remote, const qp_connect_options& options);

    /// The same three transitions one at a time, for a connection manager
    /// that supplies part of the attributes (rdma_init_qp_attr): `base` and
    /// `base_mask` carry what it set (path, QPN, PSN, RDMA read depths), and
    /// `options` then set everything they name (port, access, MTU cap, GID
    /// index, min RNR timer, timeout, retry count, RNR retry). With an empty
    /// base, modify_to_rtr needs `remote`.
    void modify_to_init(const qp_connect_options& options, ibv_qp_attr base = {}, int base_mask = 0);
    /// INIT -> RTR (ready to receive) towards `remote` (or the path in
    /// `base`), as described above. Throws verbs_error naming the transition
    /// and the refused values.
    void modify_to_rtr(const qp_connect_options& options, const qp_endpoint* remote, ibv_qp_attr base = {},
                       int base_mask = 0);
    /// RTR -> RTS (ready to send), as described above. Throws verbs_error
    /// naming the transition and the refused values.
    void modify_to_rts(const qp_connect_options& options, ibv_qp_attr base = {}, int base_mask = 0);

    /// Moves the QP to ERROR: outstanding work requests complete with
    /// IBV_WC_WR_FLUSH_ERR.
    void to_error();

    /// Posts one work request (or a chain). Throws verbs_error, e.g. ENOMEM
    /// when the send queue is full.
    void post_send(ibv_send_wr& wr) {
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) [[unlikely]]
            throw_post_error("ibv_post_send", rc);
    }
    /// Posts one receive (or a chain) to the QP's own receive queue (not
    /// for a QP on an SRQ). Throws verbs_error, e.g. ENOMEM when the receive
    /// queue is full.
    void post_recv(ibv_recv_wr& wr) {
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(qp_, &wr, &bad); rc != 0) [[unlikely]]
            throw_post_error("ibv_post_recv", rc);
    }

    /// Throws the verbs_error for a failed post (`rc` as ibv_post_send or
    /// ibv_post_recv returned it), naming the call and this QP.
    [[noreturn]] void throw_post_error(const char* call, int rc) const;

private:
    queue_pair(std::shared_ptr<protection_domain> pd, std::shared_ptr<completion_queue> send_cq,
               std::shared_ptr<completion_queue> recv_cq, const qp_capacity& capacity);
    void modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& details);

    std::shared_ptr<protection_domain> pd_;
    std::shared_ptr<completion_queue> send_cq_;
    std::shared_ptr<completion_queue> recv_cq_;
    qp_capacity capacity_;
    ibv_qp* qp_ = nullptr;
    ibv_srq* srq_ = nullptr;
    std::uint32_t psn_ = 0;
};

}  // namespace cordma
