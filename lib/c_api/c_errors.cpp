// The C API's errors: each failed call leaves errno and a message naming
// the call, its subject (usually the peer) and the reason, per thread
// (cordma_last_error, cordma_last_errno). Every C++ exception is turned
// into one here, so none crosses the C boundary.
#include <cerrno>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include <cordma/error.hpp>

#include "c_api/c_context.hpp"
#include "c_api/c_frames.hpp"

namespace cordma::detail::c_api {

namespace {

thread_local std::string last_message;
thread_local int last_errno = 0;

/// errno for an error code: its own value when it is one (generic or
/// system category, or any category that maps onto a generic condition),
/// else EIO.
int errno_of(const std::error_code& code) {
    if (code.category() == std::generic_category() || code.category() == std::system_category())
        return code.value() != 0 ? code.value() : EIO;
    std::error_condition c = code.default_error_condition();
    if (c.category() == std::generic_category() && c.value() != 0)
        return c.value();
    return EIO;
}

}  // namespace

std::pair<int, std::string> classify(std::exception_ptr error) noexcept {
    try {
        try {
            std::rethrow_exception(error);
        } catch (const c_failure& e) {
            return {e.errnum(), e.what()};
        } catch (const timed_out_error& e) {
            return {ETIMEDOUT, e.what()};
        } catch (const disconnected_error& e) {
            return {ENOTCONN, e.what()};
        } catch (const operation_cancelled& e) {
            return {ECANCELED, e.what()};
        } catch (const work_completion_error& e) {
            return {EIO, e.what()};
        } catch (const std::system_error& e) {
            return {errno_of(e.code()), e.what()};
        } catch (const std::invalid_argument& e) {
            return {EINVAL, e.what()};
        } catch (const std::out_of_range& e) {
            return {EINVAL, e.what()};
        } catch (const std::bad_alloc&) {
            return {ENOMEM, "out of memory"};
        } catch (const std::exception& e) {
            return {EIO, e.what()};
        } catch (...) {
            return {EIO, "an unknown error (a bug in cordma: please report it)"};
        }
    } catch (...) {
        return {ENOMEM, {}};  // building the message failed
    }
}

void record_failure(const char* call, const std::string& subject, std::exception_ptr error) noexcept {
    auto [errnum, reason] = classify(error);
    try {
        last_message = std::string(call) + (subject.empty() ? std::string() : "(" + subject + ")") + ": " + reason;
    } catch (...) {
        last_message.clear();
    }
    last_errno = errnum;
    errno = errnum;
}

}  // namespace cordma::detail::c_api

extern "C" {

const char* cordma_last_error(void) { return cordma::detail::c_api::last_message.c_str(); }

int cordma_last_errno(void) { return cordma::detail::c_api::last_errno; }

}  // extern "C"
