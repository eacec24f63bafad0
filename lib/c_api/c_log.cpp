// The C API's log hook (cordma.h: cordma_set_log_sink, cordma_set_log_level):
// a C function pointer and its user pointer, wrapped as cordma::log_sink.
#include <cordma/cordma.h>
#include <cordma/log.hpp>

#include <stdexcept>
#include <string>

#include "c_api/c_context.hpp"

static_assert(static_cast<int>(cordma::log_level::debug) == CORDMA_LOG_DEBUG &&
                  static_cast<int>(cordma::log_level::info) == CORDMA_LOG_INFO &&
                  static_cast<int>(cordma::log_level::warning) == CORDMA_LOG_WARNING &&
                  static_cast<int>(cordma::log_level::error) == CORDMA_LOG_ERROR &&
                  static_cast<int>(cordma::log_level::off) == CORDMA_LOG_OFF,
              "cordma.h's log levels are cordma::log_level's values");

extern "C" int cordma_set_log_sink(cordma_log_sink sink, void* user) {
    try {
        if (!sink) {
            cordma::set_log_sink(nullptr);
            return 0;
        }
        cordma::set_log_sink([sink, user](cordma::log_level level, std::string_view line) {
            // A C sink wants a terminated string. Only lines that pass the
            // level get here, so the copy costs nothing on a quiet path.
            std::string text(line);
            sink(static_cast<cordma_log_level>(level), text.c_str(), user);
        });
        return 0;
    } catch (...) {  // std::bad_alloc copying the sink
        cordma::detail::c_api::record_failure("cordma_set_log_sink", {}, std::current_exception());
        return -1;
    }
}

extern "C" int cordma_set_log_level(cordma_log_level level) {
    int value = static_cast<int>(level);
    if (value < CORDMA_LOG_DEBUG || value > CORDMA_LOG_OFF) {
        cordma::detail::c_api::record_failure(
            "cordma_set_log_level", {},
            std::make_exception_ptr(std::invalid_argument("level " + std::to_string(value) +
                                                          " is not a cordma_log_level (CORDMA_LOG_DEBUG, 0, to "
                                                          "CORDMA_LOG_OFF, 4)")));
        return -1;
    }
    cordma::set_log_level(static_cast<cordma::log_level>(value));
    return 0;
}
