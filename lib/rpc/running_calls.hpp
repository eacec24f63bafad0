#pragma once
/// A call an rpc server is serving (from its request's arrival to its
/// answer's send): its entry in the server's part of the stuck reports
/// (engine/pending_list.hpp), and a traced call's span (trace.hpp). Lives
/// in its run_call coroutine's frame. Event listener thread.

#include <cstdint>
#include <string>
#include <system_error>

#include <cordma/stuck_report.hpp>
#include <cordma/trace.hpp>

#include "core/trace_span.hpp"
#include "engine/pending_list.hpp"

namespace cordma::rpc::detail {

class running_call : public cordma::detail::pending_entry {
public:
    running_call(cordma::detail::pending_list& list, std::uint64_t id, std::uint32_t method, const std::string* peer,
                 std::uint32_t qp_num, std::uint64_t began_ms, std::uint64_t bytes, const trace_id& trace) noexcept;
    /// Closes its span if open (with `outcome`).
    ~running_call();

    /// Opens its span (a traced call, a hook set), under the method's name.
    void open_span(const std::string* method_name) noexcept;
    /// Where it is, for a stuck report ("reading its request", ...).
    void at(const char* phase) noexcept { phase_ = phase; }
    /// How it ended, for its span: empty for an answer.
    void ended(std::error_code outcome) noexcept { outcome_ = outcome; }

private:
    void describe(std::uint64_t now_ms, pending_operation& out) const override;
    span_info span() const noexcept;

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

}  // namespace cordma::rpc::detail
