#pragma once
/// One checker per C error convention, so every call site states which
/// convention its callee follows and the message is only built on failure.

#include <cerrno>
#include <string>

#include <cordma/error.hpp>

namespace cordma::detail {

/// Throws verbs_error(errno_value, describe()). Out of line: keeps the
/// string building off the callers' hot paths.
[[noreturn]] void throw_verbs_error(int errno_value, const std::string& call);

/// What a work-completion status means, where it has one cause worth
/// telling (a retry error: the peer stopped answering), or null.
const char* work_completion_meaning(ibv_wc_status status) noexcept;

/// For calls that return 0 or an errno value (ibv_modify_qp, ibv_post_send,
/// ibv_req_notify_cq). Some providers return -1 and set errno instead, or a
/// negative errno; all three are understood.
template <class Describe>
inline void check_errno_return(int rc, Describe&& describe) {
    if (rc == 0) [[likely]]
        return;
    int errno_value = rc > 0 ? rc : (rc == -1 && errno != 0 ? errno : -rc);
    throw_verbs_error(errno_value, describe());
}

/// For calls that return -1 and set errno (rdma_cm, ibv_get_cq_event, POSIX).
template <class Describe>
inline int check_minus_one(int rc, Describe&& describe) {
    if (rc == -1) [[unlikely]]
        throw_verbs_error(errno != 0 ? errno : EIO, describe());
    return rc;
}

/// For calls that return NULL and set errno (ibv_open_device, ibv_reg_mr, ...).
/// A provider that forgets errno still yields a useful message (ENOMEM).
template <class T, class Describe>
inline T* check_pointer(T* p, Describe&& describe) {
    if (p == nullptr) [[unlikely]]
        throw_verbs_error(errno != 0 ? errno : ENOMEM, describe());
    return p;
}

}  // namespace cordma::detail
