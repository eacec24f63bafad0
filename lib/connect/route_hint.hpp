#pragma once
/// Why an address may be unreachable over RDMA, as a sentence for a connect
/// error: which netdev the kernel's route to it leaves through, and whether
/// an RDMA device sits on that netdev.

#include <string>

#include <cordma/address.hpp>

namespace cordma::detail {

/// E.g. "the route to 10.1.0.9 leaves through eth1, which has no RDMA
/// device (RDMA devices here: rxe0 on eth0); add one (`rdma link add rxe1
/// type rxe netdev eth1`) or reach it through eth0", or "" if nothing
/// useful can be said. Blocking but quick (a UDP socket's connect, no
/// packet sent; getifaddrs; sysfs reads).
std::string route_hint(const socket_address& where);

}  // namespace cordma::detail
