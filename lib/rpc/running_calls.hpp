#pragma once
/// The calls an rpc server is serving (from a request's arrival to its
/// answer's send), for its part of the stuck reports, and each traced
/// call's span (trace.hpp). Each call's entry lives in its run_call
/// coroutine's frame and is linked into its server's list: O(1) in and
/// out, no allocation. Event listener thread.

#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include <cordma/stuck_report.hpp>
#include <cordma/trace.hpp>

#include "core/trace_span.hpp"

namespace cordma::rpc::detail {

class running_calls;

/// One call being served; links itself into `list` for its life.
class running_call {
public:
    running_call(running_calls& list, std::uint64_t id, std::uint32_t method, const std::string* peer,
                 std::uint32_t qp_num, std::uint64_t began_ms, std::uint64_t bytes, const trace_id& trace) noexcept;
    /// Unlinks it; closes its span if open (with `outcome`).
    ~running_call();
    running_call(const running_call&) = delete;
    running_call& operator=(const running_call&) = delete;

    /// Opens its span (a traced call, a hook set), under the method's name.
    void open_span(const std::string* method_name) noexcept;
    /// Where it is, for a stuck report ("reading its request", ...).
    void at(const char* phase) noexcept { phase_ = phase; }
    /// How it ended, for its span: empty for an answer.
    void ended(std::error_code outcome) noexcept { outcome_ = outcome; }

private:
    friend class running_calls;
    span_info span() const noexcept;

    running_calls* list_;
    running_call* prev_ = nullptr;
    running_call* next_ = nullptr;
    std::uint64_t id_;
    std::uint32_t method_;
    const std::string* peer_;
    const std::string* method_name_ = nullptr;
    std::uint32_t qp_num_;
    std::uint64_t began_ms_;
    std::uint64_t bytes_;
    trace_id trace_;
    const char* phase_ = "reading its request";
    std::error_code outcome_;
    cordma::detail::traced_span span_;
};

/// A server's calls being served.
class running_calls {
public:
    /// Each as a pending operation (stage rpc_handler), for a stuck report.
    void collect(std::uint64_t now_ms, std::vector<pending_operation>& out) const;

private:
    friend class running_call;
    running_call* head_ = nullptr;
};

}  // namespace cordma::rpc::detail
