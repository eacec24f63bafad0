#include "connect/route_hint.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

namespace cordma::detail {

namespace {

/// netdev name -> the RDMA devices on it, from sysfs (every port's GID
/// table names the netdev each entry came from).
std::map<std::string, std::set<std::string>> rdma_netdevs() {
    std::map<std::string, std::set<std::string>> out;
    std::error_code ec;
    for (const auto& dev : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
        std::error_code ports_ec;
        for (const auto& port : std::filesystem::directory_iterator(dev.path() / "ports", ports_ec)) {
            for (int index = 0; index < 16; ++index) {
                std::ifstream in(port.path() / "gid_attrs" / "ndevs" / std::to_string(index));
                std::string netdev;
                if (in && std::getline(in, netdev) && !netdev.empty())
                    out[netdev].insert(dev.path().filename().string());
            }
        }
    }
    return out;
}

/// The netdev owning local address `local`, or "".
std::string netdev_of(const sockaddr* local) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0)
        return {};
    std::string name;
    for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != local->sa_family)
            continue;
        if (local->sa_family == AF_INET &&
            std::memcmp(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr,
                        &reinterpret_cast<const sockaddr_in*>(local)->sin_addr, sizeof(in_addr)) == 0)
            name = a->ifa_name;
        if (local->sa_family == AF_INET6 &&
            std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr,
                        &reinterpret_cast<const sockaddr_in6*>(local)->sin6_addr, sizeof(in6_addr)) == 0)
            name = a->ifa_name;
    }
    freeifaddrs(list);
    return name;
}

std::string host_of(const socket_address& where) {
    std::string text = where.to_string();
    auto colon = text.rfind(':');
    text = text.substr(0, colon);
    if (!text.empty() && text.front() == '[')
        text = text.substr(1, text.size() - 2);
    return text;
}

}  // namespace

std::string route_hint(const socket_address& where) {
    auto devices = rdma_netdevs();
    std::string here;
    for (const auto& [netdev, names] : devices)
        for (const auto& name : names)
            here += (here.empty() ? "" : ", ") + name + " on " + netdev;
    here = "RDMA devices here: " + (here.empty() ? std::string("none") : here);
    std::string host = host_of(where);

    // Connecting a UDP socket sends nothing: it asks the kernel for the
    // route, and getsockname then says which local address it would use.
    int fd = ::socket(where.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return {};
    socket_address local;
    socklen_t length = sizeof local.storage;
    int rc = ::connect(fd, where.get(), where.length);
    int route_errno = rc == 0 ? 0 : errno;
    if (rc == 0)
        rc = ::getsockname(fd, local.get(), &length);
    ::close(fd);
    if (route_errno == ENETUNREACH)
        return "this host has no route to " + host + " (`ip route get " + host + "` says so too); " + here +
               ": give the netdev of one of them an address on " + host + "'s network, or a route to it";
    if (rc != 0)
        return {};
    std::string netdev = netdev_of(local.get());
    if (netdev.empty())
        return {};
    auto on = devices.find(netdev);
    if (on == devices.end())
        return "the route to " + host + " leaves through " + netdev + ", which has no RDMA device (" + here +
               "); add one (`rdma link add rxe_" + netdev + " type rxe netdev " + netdev +
               "`), or route " + host + " through a netdev that has one";
    return "the route to " + host + " leaves through " + netdev + " (" + *on->second.begin() +
           "), and no host answered there: is it up, is " + host + " its address, and is it on that link?";
}

}  // namespace cordma::detail
