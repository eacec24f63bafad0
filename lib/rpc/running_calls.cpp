// running_calls: an rpc server's calls in progress, as its stuck report
// lists them, and their spans (running_calls.hpp).
#include "rpc/running_calls.hpp"

#include <cordma/rpc.hpp>

#include "engine/pending_source.hpp"

namespace cordma::rpc::detail {

running_call::running_call(cordma::detail::pending_list& list, std::uint64_t id, std::uint32_t method,
                           const std::string* peer, std::uint32_t qp_num, std::uint64_t began_ms, std::uint64_t bytes,
                           const trace_id& trace) noexcept
    : pending_entry(list), id_(id), method_(method), peer_(peer), qp_num_(qp_num), began_ms_(began_ms), bytes_(bytes),
      trace_(trace), outcome_(make_error_code(rpc_errc::cancelled)) {}

running_call::~running_call() {
    if (span_.is_open())
        span_.close(span(), outcome_);
}

void running_call::open_span(const std::string* method_name) noexcept {
    method_name_ = method_name;
    if (!trace_.empty())
        span_.open(span());
}

span_info running_call::span() const noexcept {
    span_info s;
    s.kind = span_kind::rpc_handler;
    s.trace = trace_;
    s.method = method_;
    if (method_name_ != nullptr)
        s.name = *method_name_;
    s.peer = *peer_;
    s.id = id_;
    s.bytes = bytes_;
    return s;
}

void running_call::describe(std::uint64_t now_ms, pending_operation& p) const {
    p.peer = *peer_;
    p.qp_num = qp_num_;
    p.role = "data";
    p.stage = pending_stage::rpc_handler;
    p.age = cordma::detail::age_of(now_ms, began_ms_);
    p.bytes = bytes_;
    p.what = "rpc call #" + std::to_string(id_) + " to method " + std::to_string(method_) +
             (method_name_ != nullptr && !method_name_->empty() ? " (" + *method_name_ + ")" : "") + ", " + phase_;
    p.trace = trace_;
}

}  // namespace cordma::rpc::detail
