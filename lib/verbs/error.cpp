#include "verbs/check.hpp"

#include <cstdio>

namespace cordma {

namespace detail {

void throw_verbs_error(int errno_value, const std::string& call) { throw verbs_error(errno_value, call); }

}  // namespace detail

namespace {

class work_completion_category_impl : public std::error_category {
public:
    const char* name() const noexcept override { return "cordma.work_completion"; }
    std::string message(int status) const override { return ibv_wc_status_str(static_cast<ibv_wc_status>(status)); }
};

std::string describe(ibv_wc_status status, const char* operation, std::uint32_t vendor_error,
                     const std::string& peer) {
    char tail[64];
    std::snprintf(tail, sizeof tail, " (status %d, vendor_err 0x%x)", static_cast<int>(status), vendor_error);
    return std::string(operation) + " to " + peer + ": " + ibv_wc_status_str(status) + tail;
}

}  // namespace

const std::error_category& work_completion_category() noexcept {
    static const work_completion_category_impl category;
    return category;
}

// std::system_error appends ": " + message(); the full sentence is built here
// instead, so the status string is not printed twice.
work_completion_error::work_completion_error(ibv_wc_status status, const char* operation,
                                             std::uint32_t vendor_error, const std::string& peer)
    : std::system_error(make_error_code(status)), message_(describe(status, operation, vendor_error, peer)),
      operation_(operation), vendor_error_(vendor_error), peer_(peer) {}

}  // namespace cordma
