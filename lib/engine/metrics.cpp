// metrics.hpp's arithmetic: names, sums, and the counters grouped by peer host.
#include <cordma/metrics.hpp>

#include <infiniband/verbs.h>

#include <algorithm>

#include "engine/peer_host.hpp"

namespace cordma {

static_assert(IBV_WC_REM_ACCESS_ERR == 10 && IBV_WC_RETRY_EXC_ERR == 12 && IBV_WC_TM_RNDV_INCOMPLETE == 23,
              "completion_status_name's table follows ibv_wc_status");
static_assert(IBV_WC_TM_RNDV_INCOMPLETE + 1 == completion_statuses);

const char* name(operation_kind kind) noexcept {
    switch (kind) {
    case operation_kind::send: return "send";
    case operation_kind::send_with_imm: return "send_with_imm";
    case operation_kind::write: return "write";
    case operation_kind::write_with_imm: return "write_with_imm";
    case operation_kind::read: return "read";
    case operation_kind::fetch_add: return "fetch_add";
    case operation_kind::compare_swap: return "compare_swap";
    case operation_kind::recv: return "recv";
    }
    return "unknown";
}

const char* name(disconnect_cause cause) noexcept {
    switch (cause) {
    case disconnect_cause::closed_here: return "closed_here";
    case disconnect_cause::peer_closed: return "peer_closed";
    case disconnect_cause::failed_completion: return "failed_completion";
    case disconnect_cause::other: return "other";
    }
    return "unknown";
}

const char* completion_status_name(std::size_t status) noexcept {
    static constexpr const char* names[completion_statuses] = {
        "success",          "loc_len_err",        "loc_qp_op_err",     "loc_eec_op_err",    "loc_prot_err",
        "wr_flush_err",     "mw_bind_err",        "bad_resp_err",      "loc_access_err",    "rem_inv_req_err",
        "rem_access_err",   "rem_op_err",         "retry_exc_err",     "rnr_retry_exc_err", "loc_rdd_viol_err",
        "rem_inv_rd_req_err", "rem_abort_err",    "inv_eecn_err",      "inv_eec_state_err", "fatal_err",
        "resp_timeout_err", "general_err",        "tm_err",            "tm_rndv_incomplete"};
    return status < completion_statuses ? names[status] : "unknown";
}

std::uint64_t connection_counters::completions_reaped() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t c : completions)
        n += c;
    return n;
}

connection_counters& connection_counters::operator+=(const connection_counters& other) noexcept {
    for (std::size_t k = 0; k < operation_kinds; ++k) {
        operations[k].posted += other.operations[k].posted;
        operations[k].completed += other.operations[k].completed;
        operations[k].failed += other.operations[k].failed;
        operations[k].bytes += other.operations[k].bytes;
    }
    for (std::size_t s = 0; s < completion_statuses; ++s)
        completions[s] += other.completions[s];
    work_requests += other.work_requests;
    doorbells += other.doorbells;
    signalled += other.signalled;
    send_waits += other.send_waits;
    recv_waits += other.recv_waits;
    return *this;
}

connection_counters metrics_snapshot::total() const {
    connection_counters sum = closed;
    for (const connection_metrics& c : connections)
        sum += c.counters;
    for (const shared_receive_metrics& q : shared_receive_queues)
        sum += q.counters;
    return sum;
}

std::vector<std::pair<std::string, connection_counters>> metrics_snapshot::by_peer_host() const {
    std::vector<std::pair<std::string, connection_counters>> hosts;
    for (const connection_metrics& c : connections) {
        std::string host = detail::peer_host(c.peer);
        auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == host; });
        if (it == hosts.end())
            hosts.emplace_back(std::move(host), c.counters);
        else
            it->second += c.counters;
    }
    return hosts;
}

}  // namespace cordma
