#pragma once
/// Errors thrown by cordma.
///
/// Every failure of a C call (libibverbs, librdmacm, liburing, the kernel)
/// becomes a cordma::verbs_error, a std::system_error in the generic category
/// whose message names the call and its key arguments, then strerror:
///
///     ibv_reg_mr(length=4096, access=local_write|remote_write): Cannot allocate memory
///
/// Catch std::system_error to handle every cordma error in one place; compare
/// code() with std::errc values to tell them apart.

#include <cordma/export.hpp>
#include <cstdint>
#include <string>
#include <system_error>

#include <infiniband/verbs.h>

namespace cordma {

/// A verbs, rdma_cm or system call failed. code() holds the errno value.
class CORDMA_API verbs_error : public std::system_error {
public:
    verbs_error(int errno_value, const std::string& call)
        : std::system_error(errno_value, std::generic_category(), call) {}
};

/// The category of work-completion statuses: value() is an ibv_wc_status,
/// message() is ibv_wc_status_str.
CORDMA_API const std::error_category& work_completion_category() noexcept;

inline std::error_code make_error_code(ibv_wc_status status) noexcept {
    return {static_cast<int>(status), work_completion_category()};
}

/// An operation's work completion came back with an error status. Carries the
/// status, the operation, the vendor's error code and the peer, and says
/// what the status means where it has one cause, e.g.
///
///     write to 10.78.0.1:7620: transport retry counter exceeded (status 12,
///     vendor_err 0x0): the peer stopped acknowledging: its link or host is
///     down, or its queue pair is gone (found after (retry_count + 1) *
///     4.096 us * 2^timeout; see builder::retry_count)
///
/// An operation flushed because an earlier one broke the connection
/// (IBV_WC_WR_FLUSH_ERR) says which failure that was, in `cause`:
///
///     read to 10.78.0.1:7620: Work Request Flushed Error (status 5,
///     vendor_err 0x0): flushed: an earlier write failed with transport
///     retry counter exceeded (status 12): the peer stopped acknowledging ...
class CORDMA_API work_completion_error : public std::system_error {
public:
    work_completion_error(ibv_wc_status status, const char* operation, std::uint32_t vendor_error,
                          const std::string& peer, const std::string& cause = {});

    ibv_wc_status status() const noexcept { return static_cast<ibv_wc_status>(code().value()); }
    const char* operation() const noexcept { return operation_; }
    std::uint32_t vendor_error() const noexcept { return vendor_error_; }
    const std::string& peer() const noexcept { return peer_; }
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
    const char* operation_;
    std::uint32_t vendor_error_;
    std::string peer_;
};

/// An operation was cancelled (through its std::stop_token) before it
/// completed. code() == std::errc::operation_canceled. `note` says what
/// became of work already posted, e.g. for a recv cancelled after posting:
///
///     recv to 10.77.0.2:7471: cancelled after its receive was posted; the
///     message that lands in it goes to the next recv on this connection, in
///     order: Operation canceled
class CORDMA_API operation_cancelled : public std::system_error {
public:
    operation_cancelled(const char* operation, const std::string& peer, const std::string& note = {})
        : std::system_error(std::make_error_code(std::errc::operation_canceled),
                            std::string(operation) + " to " + peer + (note.empty() ? "" : ": " + note)) {}
};

/// A call ran out of time: its deadline passed before the peer answered
/// (e.g. an agent call past agent_call::timeout or builder::agent_timeout).
/// code() == std::errc::timed_out; the message names the call, the peer,
/// the limit and what became of the connection.
class CORDMA_API timed_out_error : public std::system_error {
public:
    timed_out_error(const char* operation, const std::string& peer, const std::string& why)
        : std::system_error(std::make_error_code(std::errc::timed_out)),
          message_(std::string(operation) + " to " + peer + ": " + why) {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

/// The connection is closed, by this side or the peer, or broken by an
/// earlier error: the operation was not started. code() ==
/// std::errc::not_connected.
class CORDMA_API disconnected_error : public std::system_error {
public:
    disconnected_error(const char* operation, const std::string& peer, const std::string& why)
        : std::system_error(std::make_error_code(std::errc::not_connected)),
          message_(std::string(operation) + " to " + peer + ": not connected: " + why) {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

}  // namespace cordma

template <>
struct std::is_error_code_enum<ibv_wc_status> : std::true_type {};
