#include <cordma/memory_region.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "verbs/check.hpp"

namespace cordma {

namespace {

/// A field of /proc/self/status ("VmPin:", "CapEff:"), or "" if absent.
std::string status_field(const char* name) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind(name, 0) == 0) {
            auto start = line.find_first_not_of(" \t", std::strlen(name));
            return start == std::string::npos ? std::string() : line.substr(start);
        }
    return {};
}

bool has_ipc_lock() {
    std::string caps = status_field("CapEff:");
    if (caps.empty())
        return false;
    unsigned long long bits = std::strtoull(caps.c_str(), nullptr, 16);
    return (bits >> 14) & 1;  // CAP_IPC_LOCK
}

std::string kib(unsigned long long bytes) { return std::to_string(bytes / 1024) + " KiB"; }

// The kernel refuses to pin pages past RLIMIT_MEMLOCK with ENOMEM (unless
// the process has CAP_IPC_LOCK, which is why root never sees it). Say so,
// with the numbers and the ways out, rather than "Cannot allocate memory".
[[noreturn]] void registration_failed(int errno_value, std::size_t length, access_flags access) {
    std::string call = "ibv_reg_mr(length=" + std::to_string(length) + ", access=" + to_string(access) + ")";
    rlimit limit{};
    if (errno_value != ENOMEM || getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
        has_ipc_lock())
        detail::throw_verbs_error(errno_value, call);
    std::string pinned = status_field("VmPin:");
    throw verbs_error(
        make_error_code(errc::memlock_limit),
        call + ": " + std::strerror(errno_value) + ": the locked-memory limit (RLIMIT_MEMLOCK) is " +
            kib(limit.rlim_cur) + (pinned.empty() ? "" : ", this process has " + pinned + " pinned already") +
            ", and registering pins " + kib(length) +
            " more. Raise the limit (`ulimit -l unlimited` in the shell that starts the program; for a user, a "
            "'memlock' line in /etc/security/limits.d/; for a systemd service, LimitMEMLOCK=infinity; for a "
            "container, docker run --ulimit memlock=-1), or register less: builder::pool_chunk_size sets the size "
            "of the pool's registrations (4 MiB by default)");
}

}  // namespace

memory_region memory_region::register_memory(std::shared_ptr<protection_domain> pd, void* address,
                                             std::size_t length, access_flags access) {
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(pd->native_handle(), address, length, to_verbs(access));
    if (mr == nullptr) [[unlikely]]
        registration_failed(errno != 0 ? errno : ENOMEM, length, access);
    return memory_region(std::move(pd), mr, access);
}

memory_region::memory_region(memory_region&& other) noexcept
    : pd_(std::move(other.pd_)), mr_(std::exchange(other.mr_, nullptr)), rights_(other.rights_) {}

memory_region& memory_region::operator=(memory_region&& other) noexcept {
    if (this != &other) {
        if (mr_ != nullptr)
            ibv_dereg_mr(mr_);
        pd_ = std::move(other.pd_);
        mr_ = std::exchange(other.mr_, nullptr);
        rights_ = other.rights_;
    }
    return *this;
}

memory_region::~memory_region() {
    if (mr_ != nullptr)
        ibv_dereg_mr(mr_);
}

}  // namespace cordma
