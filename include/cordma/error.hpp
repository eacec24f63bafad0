#pragma once
/// \file
/// Errors thrown by cordma.
///
/// Every failure of a C call (libibverbs, librdmacm, liburing, the kernel)
/// becomes a cordma::verbs_error, a std::system_error in the generic category
/// whose message names the call and its key arguments, then strerror:
///
///     ibv_reg_mr(length=4096, access=local_write|remote_write): Cannot allocate memory
///
/// Catch std::system_error to handle every cordma error in one place; compare
/// code() with std::errc values to tell them apart, with cordma::errc for
/// the failures that are cordma's own (a lost atomic result, a peer that
/// broke the protocol, no RDMA device, the locked-memory limit), and with
/// ibv_wc_status values for a failed work completion:
///
///     catch (const std::system_error& e) {
///         if (e.code() == std::errc::connection_refused) ...     // nothing listens there
///         else if (e.code() == std::errc::timed_out) ...          // connect_timeout, agent_timeout,
///                                                                  // or the peer stopped acknowledging
///         else if (e.code() == IBV_WC_REM_ACCESS_ERR) ...         // the exact status
///         else if (e.code() == cordma::errc::atomic_result_lost) ...
///     }
///
/// Which std::errc each failure compares equal to is listed with each type
/// below and with cordma::errc; the message (what()) always says more: the
/// call, the peer, and what to do.

#include <cordma/export.hpp>
#include <cstdint>
#include <string>
#include <system_error>

#include <infiniband/verbs.h>

namespace cordma {

/// Failures that are cordma's own, in cordma_category(). Each compares
/// equal to the std::errc value given (so code that only knows std::errc
/// still branches right), and to itself:
///
///     e.code() == cordma::errc::memlock_limit       // exactly this
///     e.code() == std::errc::not_enough_memory      // also true
enum class errc {
    /// No RDMA device, or not the one named (builder::device): the message
    /// lists the devices there are and how to make one. Equals
    /// std::errc::no_such_device.
    no_device = 1,
    /// The kernel refused to pin memory for a registration because of the
    /// locked-memory limit (RLIMIT_MEMLOCK): the message gives the limit,
    /// the bytes asked for, how to raise it and the builder setting that
    /// asks for less (builder::pool_chunk_size). Equals
    /// std::errc::not_enough_memory.
    memlock_limit,
    /// A host name did not resolve (getaddrinfo failed). No std::errc
    /// equivalent: it is not "no route to host".
    host_not_found,
    /// The peer answered the connection handshake with something cordma's
    /// protocol does not allow (a malformed TCP endpoint message); the
    /// connection is not made. Equals std::errc::protocol_error, which is
    /// what to compare with to catch every protocol failure: streams and
    /// groups report theirs as std::errc::protocol_error, rpc as
    /// rpc_errc::protocol (equal to it too).
    protocol_violation,
    /// A fetch_add or compare_swap was carried out on the peer but the
    /// device did not return its old value (a fault of rxe, Soft-RoCE,
    /// under packet loss; see connection::fetch_add). Read the word to learn
    /// where it stands. Equals std::errc::io_error.
    atomic_result_lost,
};

/// The category of cordma::errc: name() is "cordma".
CORDMA_API const std::error_category& cordma_category() noexcept;

/// Makes cordma::errc values usable as std::error_code (found by ADL).
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), cordma_category()}; }

/// A verbs, rdma_cm or system call failed. code() holds the errno value in
/// std::generic_category() (so it compares with std::errc directly), or a
/// cordma::errc where cordma knows the cause better (errc::no_device,
/// errc::memlock_limit). what() names the call and its key arguments.
class CORDMA_API verbs_error : public std::system_error {
public:
    /// `call` is "ibv_reg_mr(length=4096, access=...)"; what() appends
    /// strerror(errno_value).
    verbs_error(int errno_value, const std::string& call)
        : std::system_error(errno_value, std::generic_category(), call) {}
    /// `message` is the whole text what() returns.
    verbs_error(std::error_code code, const std::string& message)
        : std::system_error(code), message_(message) {}
    /// The call, its arguments and why it failed.
    const char* what() const noexcept override {
        return message_.empty() ? std::system_error::what() : message_.c_str();
    }

private:
    std::string message_;
};

/// The category of work-completion statuses: value() is an ibv_wc_status,
/// message() is ibv_wc_status_str. Statuses with a generic meaning also
/// compare equal to a std::errc value: IBV_WC_RETRY_EXC_ERR (the peer
/// stopped acknowledging) to std::errc::timed_out, IBV_WC_REM_ACCESS_ERR
/// and IBV_WC_LOC_PROT_ERR to std::errc::permission_denied,
/// IBV_WC_WR_FLUSH_ERR (the connection broke before the operation ran) to
/// std::errc::connection_aborted.
CORDMA_API const std::error_category& work_completion_category() noexcept;

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
    /// Builds the message shown above from the status, the operation
    /// ("write"), the device's vendor_err, the peer and, for a flushed
    /// operation, the failure that broke the connection.
    work_completion_error(ibv_wc_status status, const char* operation, std::uint32_t vendor_error,
                          const std::string& peer, const std::string& cause = {});

    /// The work completion's status (also code().value()).
    ibv_wc_status status() const noexcept { return static_cast<ibv_wc_status>(code().value()); }
    /// The operation that failed: "send", "write", "read", "fetch_add", ...
    const char* operation() const noexcept { return operation_; }
    /// The device's own error detail (ibv_wc::vendor_err).
    std::uint32_t vendor_error() const noexcept { return vendor_error_; }
    /// The peer's address, "10.78.0.1:7620".
    const std::string& peer() const noexcept { return peer_; }
    /// The whole sentence shown above.
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
    /// "recv to 10.77.0.2:7471: " + note.
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
    /// "receive_remote_mr to 10.77.0.2:7471: " + why.
    timed_out_error(const char* operation, const std::string& peer, const std::string& why)
        : std::system_error(std::make_error_code(std::errc::timed_out)),
          message_(std::string(operation) + " to " + peer + ": " + why) {}
    /// The call, the peer, the limit and what became of the connection.
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

/// The connection is closed, by this side or the peer, or broken by an
/// earlier error: the operation was not started. code() ==
/// std::errc::not_connected.
class CORDMA_API disconnected_error : public std::system_error {
public:
    /// "write to 10.77.0.2:7471: not connected: " + why.
    disconnected_error(const char* operation, const std::string& peer, const std::string& why)
        : std::system_error(std::make_error_code(std::errc::not_connected)),
          message_(std::string(operation) + " to " + peer + ": not connected: " + why) {}
    /// The call, the peer and why the connection is gone.
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

/// A connection could not be made: connect() or accept() failed because of
/// the peer or the network (refused, unreachable, timed out, a peer that
/// is not cordma or is set up differently), over rdma_cm or the TCP
/// exchange. code() compares equal to std::errc::connection_refused,
/// timed_out, host_unreachable, connection_aborted, protocol_not_supported
/// (the peer's builder::agent differs) or address_not_available; what()
/// says which step failed and what to check. A listener drops such a
/// client and goes on accepting.
class CORDMA_API connect_error : public std::system_error {
public:
    /// `message` is the whole text what() returns.
    connect_error(std::error_code code, std::string message)
        : std::system_error(code), message_(std::move(message)) {}
    /// The step that failed, the peer, and what to check.
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

}  // namespace cordma

/// Makes ibv_wc_status values usable as std::error_code, so
/// `e.code() == IBV_WC_REM_ACCESS_ERR` compiles and holds exactly for that
/// status. In the global namespace because ibv_wc_status is declared
/// there: that is where argument-dependent lookup finds it.
inline std::error_code make_error_code(ibv_wc_status status) noexcept {
    return {static_cast<int>(status), cordma::work_completion_category()};
}

template <>
struct std::is_error_code_enum<ibv_wc_status> : std::true_type {};

template <>
struct std::is_error_code_enum<cordma::errc> : std::true_type {};
