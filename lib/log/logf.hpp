#pragma once
// logf: cordma's own code writes its log lines with printf's formatting, so
// that each former fprintf(stderr, ...) kept its text. The level is checked
// before anything is formatted: a line below it costs one atomic load.
#include <cordma/log.hpp>

namespace cordma::detail {

/// Formats a line as printf does (no trailing newline) and hands it to
/// cordma::log. Never throws: a line that cannot be allocated is cut short.
void logf(log_level level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));

}  // namespace cordma::detail
