// The C API's metrics (cordma.h: cordma_metrics): the context's builder's
// snapshot (metrics.hpp), rendered, copied out as snprintf does.
#include <cordma/cordma.h>
#include <cordma/metrics.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "c_api/c_context.hpp"

extern "C" ssize_t cordma_metrics(const cordma_context* ctx, cordma_metrics_format format, char* buf, size_t len) {
    using cordma::detail::c_api::record_failure;
    try {
        if (ctx == nullptr)
            throw std::system_error(EINVAL, std::generic_category(), "the context is NULL");
        if (format != CORDMA_METRICS_JSON && format != CORDMA_METRICS_PROMETHEUS)
            throw std::system_error(EINVAL, std::generic_category(),
                                    "format " + std::to_string(static_cast<int>(format)) +
                                        " is not a cordma_metrics_format (CORDMA_METRICS_JSON, 0, or "
                                        "CORDMA_METRICS_PROMETHEUS, 1)");
        if (buf == nullptr && len != 0)
            throw std::system_error(EINVAL, std::generic_category(), "buf is NULL and len is not 0");
        cordma::metrics_snapshot m = ctx->builder.metrics();
        std::string text = format == CORDMA_METRICS_JSON ? cordma::to_json(m) : cordma::to_prometheus(m);
        if (len != 0) {
            std::size_t n = std::min(text.size(), len - 1);
            std::memcpy(buf, text.data(), n);
            buf[n] = '\0';
        }
        return static_cast<ssize_t>(text.size());
    } catch (...) {
        record_failure("cordma_metrics", {}, std::current_exception());
        return -1;
    }
}
