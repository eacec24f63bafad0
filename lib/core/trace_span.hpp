#pragma once
/// One traced operation's span: the hook it opened under (set_span_hook),
/// and the handle its open returned, to close it with. Lives with the
/// operation (an rpc call's frame); open only for a traced one.

#include <cstdint>
#include <system_error>

#include <cordma/trace.hpp>

namespace cordma::detail {

class traced_span {
public:
    /// Calls the process's hook's open, if there is one (info.trace set).
    void open(const span_info& info) noexcept;
    /// Calls close on the hook open() found, once; nothing if none.
    void close(const span_info& info, const std::error_code& outcome) noexcept;
    /// Whether open() found a hook and close() has not run yet.
    bool is_open() const noexcept { return hook_ != nullptr; }

private:
    const span_hook* hook_ = nullptr;
    std::uint64_t handle_ = 0;
};

}  // namespace cordma::detail
