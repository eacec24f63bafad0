#pragma once
/// \file
/// "host:port" addresses as users write them, parsed and resolved with
/// errors that say which part was wrong.

#include <cordma/export.hpp>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace cordma {

/// A parsed, not yet resolved address: "10.0.0.1:7471", "node3:7471",
/// "[fe80::1%eth0]:7471". A bare host gets `default_port` if it is nonzero.
struct CORDMA_API host_port {
    /// The host as written, without brackets: a name, an IPv4 address, or
    /// an IPv6 address with its zone ("fe80::1%eth0"). Empty for a bare
    /// ":port" (any address, for listening).
    std::string host;
    /// The port, or the parser's `default_port` when the address had none.
    std::uint16_t port = 0;
};

/// Throws std::invalid_argument naming `address` and what is wrong with it
/// (no port, a port that is not a number in 1..65535, an empty host,
/// an unclosed '['). Listening addresses may use port 0 ("any free port").
CORDMA_API host_port parse_address(std::string_view address, std::uint16_t default_port = 0, bool allow_port_zero = false);

/// A resolved socket address.
struct CORDMA_API socket_address {
    /// The address, large enough for any family (IPv4 or IPv6).
    sockaddr_storage storage{};
    /// How many bytes of `storage` the address uses (0: none resolved).
    socklen_t length = 0;

    /// The address as the socket calls and rdma_cm take it; valid while
    /// this object lives.
    sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
    /// The address as the socket calls and rdma_cm take it; valid while
    /// this object lives.
    const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
    /// AF_INET or AF_INET6 (AF_UNSPEC before anything is resolved).
    int family() const noexcept { return storage.ss_family; }
    /// "10.0.0.1:7471" or "[fe80::1]:7471".
    std::string to_string() const;
};

/// Resolves `where` (getaddrinfo; blocking, so call it off the event
/// listener thread). `passive` allows an empty host ("any address") for listening.
/// Throws std::system_error with code() == cordma::errc::host_not_found,
/// naming the host and the resolver's reason, when it does not resolve.
CORDMA_API socket_address resolve(const host_port& where, bool passive = false);

}  // namespace cordma
