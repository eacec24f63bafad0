#pragma once
// The tests' side of a metrics endpoint (metrics_endpoint.hpp): connect to
// its address and exchange one HTTP request for the whole answer, as a
// scraper (curl, Prometheus, cordma-stat) would.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include <catch2/catch.hpp>

namespace cordma::test {

/// A connected socket to "unix:PATH", "unix:@NAME" (the abstract
/// namespace) or an IPv4 "HOST:PORT".
inline int connect_endpoint(const std::string& address) {
    if (address.rfind("unix:", 0) == 0) {
        std::string path = address.substr(5);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        REQUIRE(path.size() < sizeof sa.sun_path);
        std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
        socklen_t len = sizeof sa;
        if (path[0] == '@') {
            sa.sun_path[0] = '\0';
            len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
        }
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0);
        return fd;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    std::size_t colon = address.rfind(':');
    REQUIRE(inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) == 1);
    sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    return fd;
}

/// Sends `request` and reads the whole answer (the endpoint closes after it).
inline std::string http_exchange(const std::string& address, const std::string& request) {
    int fd = connect_endpoint(address);
    REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    std::string in;
    char buf[4096];
    while (ssize_t n = recv(fd, buf, sizeof buf, 0)) {
        REQUIRE(n > 0);
        in.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    return in;
}

/// GET `target`: the body of a 200 answer (anything else fails the test).
inline std::string http_get_ok(const std::string& address, const std::string& target) {
    std::string in = http_exchange(address, "GET " + target + " HTTP/1.0\r\n\r\n");
    REQUIRE(in.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    return in.substr(in.find("\r\n\r\n") + 4);
}

}  // namespace cordma::test
