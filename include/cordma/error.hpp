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

#include <string>
#include <system_error>

namespace cordma {

/// A verbs, rdma_cm or system call failed. code() holds the errno value.
class verbs_error : public std::system_error {
public:
    verbs_error(int errno_value, const std::string& call)
        : std::system_error(errno_value, std::generic_category(), call) {}
};

}  // namespace cordma
