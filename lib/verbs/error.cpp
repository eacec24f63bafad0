#include "verbs/check.hpp"

#include <cstdio>
#include <string>
#include <string_view>

namespace cordma {

namespace detail {

void throw_verbs_error(int errno_value, const std::string& call) { throw verbs_error(errno_value, call); }

const char* work_completion_meaning(ibv_wc_status status) noexcept {
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
        return "the peer stopped acknowledging: its link or host is down, or its queue pair is gone (found "
               "after (retry_count + 1) * 4.096 us * 2^timeout; see builder::retry_count)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "the peer had no receive posted through every retry (see builder::rnr_retry and "
               "builder::min_rnr_timer)";
    case IBV_WC_REM_ACCESS_ERR:
        return "the peer's device refused the access: a key it did not issue or has revoked, an address "
               "outside the region, or a right the region or the queue pair does not grant";
    case IBV_WC_REM_INV_REQ_ERR:
        return "the peer's device refused the request (too long for its receive, or an operation its queue "
               "pair does not allow)";
    default:
        return nullptr;
    }
}

}  // namespace detail

namespace {

class work_completion_category_impl : public std::error_category {
public:
    const char* name() const noexcept override { return "cordma.work_completion"; }
    std::string message(int status) const override { return ibv_wc_status_str(static_cast<ibv_wc_status>(status)); }
    std::error_condition default_error_condition(int status) const noexcept override {
        switch (static_cast<ibv_wc_status>(status)) {
        case IBV_WC_RETRY_EXC_ERR:
            return std::errc::timed_out;
        case IBV_WC_REM_ACCESS_ERR:
        case IBV_WC_LOC_PROT_ERR:
            return std::errc::permission_denied;
        case IBV_WC_WR_FLUSH_ERR:
            return std::errc::connection_aborted;
        default:
            return {status, *this};
        }
    }
};

class cordma_category_impl : public std::error_category {
public:
    const char* name() const noexcept override { return "cordma"; }
    std::string message(int value) const override {
        switch (static_cast<errc>(value)) {
        case errc::no_device:
            return "no RDMA device";
        case errc::memlock_limit:
            return "the locked-memory limit (RLIMIT_MEMLOCK) is too low";
        case errc::host_not_found:
            return "host not found";
        case errc::protocol_violation:
            return "the peer broke cordma's protocol";
        case errc::atomic_result_lost:
            return "the atomic was carried out but its old value was lost";
        }
        return "cordma error " + std::to_string(value);
    }
    std::error_condition default_error_condition(int value) const noexcept override {
        switch (static_cast<errc>(value)) {
        case errc::no_device:
            return std::errc::no_such_device;
        case errc::memlock_limit:
            return std::errc::not_enough_memory;
        case errc::protocol_violation:
            return std::errc::protocol_error;
        case errc::atomic_result_lost:
            return std::errc::io_error;
        case errc::host_not_found:
            break;
        }
        return {value, *this};
    }
};

std::string describe(ibv_wc_status status, const char* operation, std::uint32_t vendor_error,
                     const std::string& peer, const std::string& cause) {
    char tail[64];
    std::snprintf(tail, sizeof tail, " (status %d, vendor_err 0x%x)", static_cast<int>(status), vendor_error);
    std::string text = std::string(operation) + " to " + peer + ": " + ibv_wc_status_str(status) + tail;
    if (const char* meaning = detail::work_completion_meaning(status))
        text += std::string(": ") + meaning;
    // RC's rule for a SEND longer than the receive posted for it: both
    // ends fail and the connection breaks. rxe reports LOC_QP_OP_ERR on
    // the receiver and REM_OP_ERR on the sender; other devices LOC_LEN_ERR
    // and REM_INV_REQ_ERR (whose meaning above says so already).
    std::string_view op(operation);
    bool receiving = op.find("recv") != std::string_view::npos || op.find("receive") != std::string_view::npos;
    if (receiving && (status == IBV_WC_LOC_LEN_ERR || status == IBV_WC_LOC_QP_OP_ERR))
        text += ": a message longer than the posted receive buffer arrived (on RC that breaks the connection on "
                "both sides: post receives as long as the longest message the peer sends)";
    else if (!receiving && op.find("send") != std::string_view::npos && status == IBV_WC_REM_OP_ERR)
        text += ": the peer could not take it; on RC a send longer than the receive the peer posted for it "
                "does this, and the connection breaks on both sides";
    if (!cause.empty())
        text += (status == IBV_WC_WR_FLUSH_ERR ? ": flushed: " : ": ") + cause;
    return text;
}

}  // namespace

const std::error_category& work_completion_category() noexcept {
    // Never destroyed (like the standard library's own categories): an
    // operation flushed on an event listener thread still running while
    // the program exits (a handshake finishing, a connection the program
    // never dropped) builds its error after exit's destructors have run.
    static const work_completion_category_impl* category = new work_completion_category_impl;
    return *category;
}

const std::error_category& cordma_category() noexcept {
    static const cordma_category_impl* category = new cordma_category_impl;  // never destroyed, as above
    return *category;
}

// std::system_error appends ": " + message(); the full sentence is built here
// instead, so the status string is not printed twice.
work_completion_error::work_completion_error(ibv_wc_status status, const char* operation,
                                             std::uint32_t vendor_error, const std::string& peer,
                                             const std::string& cause)
    : std::system_error(make_error_code(status)), message_(describe(status, operation, vendor_error, peer, cause)),
      operation_(operation), vendor_error_(vendor_error), peer_(peer) {}

}  // namespace cordma
