#include <cordma/queue_pair.hpp>

#include <algorithm>
#include <random>

#include "verbs/check.hpp"

namespace cordma {

namespace {

std::uint32_t random_psn() {
    static thread_local std::mt19937 generator{std::random_device{}()};
    return generator() & 0xffffff;
}

}  // namespace

queue_pair::queue_pair(std::shared_ptr<protection_domain> pd, std::shared_ptr<completion_queue> send_cq,
                       std::shared_ptr<completion_queue> recv_cq, const qp_capacity& capacity)
    : pd_(std::move(pd)), send_cq_(std::move(send_cq)), recv_cq_(std::move(recv_cq)), capacity_(capacity),
      psn_(random_psn()) {}

ibv_qp_init_attr queue_pair::rc_attributes(const completion_queue& send_cq, const completion_queue& recv_cq,
                                           const qp_capacity& capacity) noexcept {
    ibv_qp_init_attr init{};
    init.send_cq = send_cq.native_handle();
    init.recv_cq = recv_cq.native_handle();
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;  // cordma chooses per work request
    init.cap.max_send_wr = capacity.max_send_wr;
    init.cap.max_recv_wr = capacity.max_recv_wr;
    init.cap.max_send_sge = capacity.max_send_sge;
    init.cap.max_recv_sge = capacity.max_recv_sge;
    init.cap.max_inline_data = capacity.max_inline_data;
    return init;
}

std::shared_ptr<queue_pair> queue_pair::create(std::shared_ptr<protection_domain> pd,
                                               std::shared_ptr<completion_queue> send_cq,
                                               std::shared_ptr<completion_queue> recv_cq,
                                               const qp_capacity& capacity, ibv_srq* srq) {
    std::shared_ptr<queue_pair> qp(new queue_pair(pd, send_cq, recv_cq, capacity));
    ibv_qp_init_attr init = rc_attributes(*send_cq, *recv_cq, capacity);
    init.qp_context = qp.get();
    init.srq = srq;
    qp->srq_ = srq;
    errno = 0;
    qp->qp_ = detail::check_pointer(ibv_create_qp(pd->native_handle(), &init), [&] {
        return "ibv_create_qp(device=" + pd->device()->name() + ", type=RC, max_send_wr=" +
               std::to_string(capacity.max_send_wr) + ", max_recv_wr=" + std::to_string(capacity.max_recv_wr) +
               ", max_send_sge=" + std::to_string(capacity.max_send_sge) + ", max_recv_sge=" +
               std::to_string(capacity.max_recv_sge) + ", max_inline_data=" +
               std::to_string(capacity.max_inline_data) + (srq != nullptr ? ", srq" : "") + ")";
    });
    // The provider may round the capacities up; report what we really got.
    qp->capacity_.max_send_wr = init.cap.max_send_wr;
    qp->capacity_.max_recv_wr = init.cap.max_recv_wr;
    qp->capacity_.max_send_sge = init.cap.max_send_sge;
    qp->capacity_.max_recv_sge = init.cap.max_recv_sge;
    qp->capacity_.max_inline_data = init.cap.max_inline_data;
    return qp;
}

std::shared_ptr<queue_pair> queue_pair::adopt(std::shared_ptr<protection_domain> pd,
                                              std::shared_ptr<completion_queue> send_cq,
                                              std::shared_ptr<completion_queue> recv_cq, ibv_qp* qp,
                                              const qp_capacity& capacity) {
    std::shared_ptr<queue_pair> out(new queue_pair(std::move(pd), std::move(send_cq), std::move(recv_cq), capacity));
    out->qp_ = qp;
    return out;
}

queue_pair::~queue_pair() {
    if (qp_ != nullptr)
        ibv_destroy_qp(qp_);
}

qp_endpoint queue_pair::local_endpoint(std::uint8_t port, int gid_index) const {
    const auto& device = *pd_->device();
    return {qp_num(), psn_, device.query_gid(port, gid_index), device.query_port(port).lid};
}

void queue_pair::modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& details) {
    detail::check_errno_return(ibv_modify_qp(qp_, &attr, mask), [&] {
        return std::string("ibv_modify_qp(qpn=") + std::to_string(qp_num()) + ", " + transition + ", " + details +
               ")";
    });
}

void queue_pair::connect(const qp_endpoint& remote, const qp_connect_options& options) {
    modify_to_init(options);
    modify_to_rtr(options, &remote);
    modify_to_rts(options);
}

void queue_pair::modify_to_init(const qp_connect_options& options, ibv_qp_attr attr, int mask) {
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = options.port;
    attr.qp_access_flags = to_verbs(options.remote_access);
    mask |= IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    modify(attr, mask, "RESET->INIT",
           "port=" + std::to_string(options.port) + ", access=" + to_string(options.remote_access));
}

void queue_pair::modify_to_rtr(const qp_connect_options& options, const qp_endpoint* remote, ibv_qp_attr attr,
                               int mask) {
    const auto& device = *pd_->device();
    ibv_port_attr port = device.query_port(options.port);
    attr.qp_state = IBV_QPS_RTR;
    if (remote != nullptr) {
        attr.dest_qp_num = remote->qpn;
        attr.rq_psn = remote->psn;
        attr.max_dest_rd_atomic =
            static_cast<std::uint8_t>(std::min<int>(options.max_rd_atomic, device.attributes().max_qp_rd_atom));
        attr.ah_attr.dlid = remote->lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        // RoCE has no LIDs: route by GID. On InfiniBand a GRH is harmless within a subnet.
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = remote->gid;
        attr.ah_attr.grh.hop_limit = 64;
        mask |= IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC;
    }
    attr.ah_attr.port_num = options.port;
    if (attr.ah_attr.is_global)
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(options.gid_index);
    // The cap, the port's active MTU and (from a connection manager) the path's.
    ibv_mtu mtu = std::min(options.mtu, port.active_mtu);
    attr.path_mtu = (mask & IBV_QP_PATH_MTU) != 0 ? std::min(attr.path_mtu, mtu) : mtu;
    attr.min_rnr_timer = options.min_rnr_timer;
    mask |= IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER;
    modify(attr, mask, "INIT->RTR",
           "dest_qpn=" + std::to_string(attr.dest_qp_num) + ", rq_psn=" + std::to_string(attr.rq_psn) +
               ", path_mtu=" + std::to_string(128 << attr.path_mtu) + ", sgid_index=" +
               std::to_string(options.gid_index) + ", dlid=" + std::to_string(attr.ah_attr.dlid) +
               ", min_rnr_timer=" + std::to_string(options.min_rnr_timer));
}

void queue_pair::modify_to_rts(const qp_connect_options& options, ibv_qp_attr attr, int mask) {
    const auto& device = *pd_->device();
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = options.timeout;
    attr.retry_cnt = options.retry_count;
    attr.rnr_retry = options.rnr_retry;
    if ((mask & IBV_QP_SQ_PSN) == 0)
        attr.sq_psn = psn_;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) == 0)
        attr.max_rd_atomic =
            static_cast<std::uint8_t>(std::min<int>(options.max_rd_atomic, device.attributes().max_qp_init_rd_atom));
    mask |= IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
            IBV_QP_MAX_QP_RD_ATOMIC;
    modify(attr, mask, "RTR->RTS",
           "timeout=" + std::to_string(options.timeout) + ", retry_cnt=" + std::to_string(options.retry_count) +
               ", rnr_retry=" + std::to_string(options.rnr_retry));
}

void queue_pair::to_error() {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    modify(attr, IBV_QP_STATE, "->ERROR", "");
}

void queue_pair::throw_post_error(const char* call, int rc) const {
    detail::throw_verbs_error(rc > 0 ? rc : EIO, std::string(call) + "(qpn=" + std::to_string(qp_num()) + ")");
}

}  // namespace cordma
