// running_calls: an rpc server's calls in progress, linked through their
// coroutine frames (running_calls.hpp), and their spans.
#include "rpc/running_calls.hpp"

#include <cordma/rpc.hpp>

#include "engine/pending_source.hpp"

namespace cordma::rpc::detail {

running_call::running_call(running_calls& list, std::uint64_t id, std::uint32_t method, const std::string* peer,
                           std::uint32_t qp_num, std::uint64_t began_ms, std::uint64_t bytes,
                           const trace_id& trace) noexcept
    : list_(&list), next_(list.head_), id_(id), method_(method), peer_(peer), qp_num_(qp_num), began_ms_(began_ms),
      bytes_(bytes), trace_(trace), outcome_(make_error_code(rpc_errc::cancelled)) {
    if (next_ != nullptr)
        next_->prev_ = this;
    list.head_ = this;
}

running_call::~running_call() {
    if (span_.is_open())
        span_.close(span(), outcome_);
    if (prev_ != nullptr)
        prev_->next_ = next_;
    else
        list_->head_ = next_;
    if (next_ != nullptr)
        next_->prev_ = prev_;
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

void running_calls::collect(std::uint64_t now_ms, std::vector<pending_operation>& out) const {
    for (const running_call* c = head_; c != nullptr; c = c->next_) {
        pending_operation p;
        p.peer = *c->peer_;
        p.qp_num = c->qp_num_;
        p.role = "data";
        p.stage = pending_stage::rpc_handler;
        p.age = cordma::detail::age_of(now_ms, c->began_ms_);
        p.bytes = c->bytes_;
        p.what = "rpc call #" + std::to_string(c->id_) + " to method " + std::to_string(c->method_) +
                 (c->method_name_ != nullptr && !c->method_name_->empty() ? " (" + *c->method_name_ + ")" : "") +
                 ", " + c->phase_;
        p.trace = c->trace_;
        out.push_back(std::move(p));
    }
}

}  // namespace cordma::rpc::detail
