#pragma once
/// \file
/// An open RDMA device (ibv_context) and the queries the rest of cordma needs
/// from it: ports, GIDs, limits.

#include <cordma/export.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <infiniband/verbs.h>

#include <cordma/error.hpp>

namespace cordma {

/// The names of the RDMA devices this host has ("rxe0", "mlx5_0", ...);
/// empty on a host without any, including one whose kernel has no RDMA
/// support at all. Throws verbs_error only if libibverbs fails otherwise.
CORDMA_API std::vector<std::string> device_names();

/// An open device. Shared: protection domains, completion queues and queue
/// pairs keep the device they were made from alive.
class CORDMA_API device_context {
public:
    /// Opens `name`, or with an empty name the first device that has an
    /// active port. Throws verbs_error with code() == cordma::errc::no_device
    /// (equal to std::errc::no_such_device) when the host has no RDMA device
    /// (saying how to make one), when `name` is not one of them (naming
    /// those there are), or when no device has an active port.
    static std::shared_ptr<device_context> open(std::string_view name = {});

    /// The device of a context librdmacm opened (an rdma_cm_id's verbs).
    static std::shared_ptr<device_context> from_native(ibv_context* context);

    ~device_context();
    device_context(const device_context&) = delete;
    device_context& operator=(const device_context&) = delete;

    /// The libibverbs context, for calls cordma does not wrap; owned by
    /// librdmacm for the whole process (never close it).
    ibv_context* native_handle() const noexcept { return context_; }
    /// The device's name ("rxe0").
    const std::string& name() const noexcept { return name_; }
    /// What ibv_query_device said when the device was opened (limits such
    /// as max_qp_wr, max_sge, max_qp_rd_atom).
    const ibv_device_attr& attributes() const noexcept { return attributes_; }

    /// The state of `port` now (ibv_query_port); verbs_error naming the
    /// device and port if it fails (e.g. no such port).
    ibv_port_attr query_port(std::uint8_t port) const;
    /// The lowest-numbered port in state ACTIVE, or 0 if none is.
    std::uint8_t first_active_port() const;

    /// The GID at `index` of `port`'s table (ibv_query_gid); verbs_error
    /// naming the device, port and index if it fails.
    ibv_gid query_gid(std::uint8_t port, int index) const;
    /// The index of a RoCE v2 GID on `port` for addresses of `family`
    /// (AF_INET: an IPv4-mapped GID; AF_INET6: any other non-link-local one,
    /// else the link-local one). InfiniBand ports answer 0. Throws verbs_error
    /// if the port has no such GID (e.g. no IP address on its netdev).
    int find_gid_index(std::uint8_t port, int family) const;

private:
    device_context(ibv_context* context, std::string name);

    ibv_context* context_;
    std::string name_;
    ibv_device_attr attributes_{};
};

}  // namespace cordma
