#include <cordma/address.hpp>
#include <cordma/error.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace cordma {

namespace {

[[noreturn]] void bad_address(std::string_view address, const std::string& why) {
    throw std::invalid_argument("address '" + std::string(address) + "': " + why +
                                " (expected host:port, e.g. 10.0.0.1:7471 or [fe80::1]:7471)");
}

}  // namespace

host_port parse_address(std::string_view address, std::uint16_t default_port, bool allow_port_zero) {
    host_port out;
    std::string_view port_text;
    if (!address.empty() && address.front() == '[') {
        auto close = address.find(']');
        if (close == std::string_view::npos)
            bad_address(address, "'[' without a closing ']'");
        out.host = std::string(address.substr(1, close - 1));
        auto rest = address.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':')
                bad_address(address, "expected ':' after ']'");
            port_text = rest.substr(1);
        }
    } else {
        auto colon = address.rfind(':');
        if (colon != std::string_view::npos && address.find(':') != colon)
            bad_address(address, "an IPv6 address needs brackets");
        if (colon == std::string_view::npos) {
            out.host = std::string(address);
        } else {
            out.host = std::string(address.substr(0, colon));
            port_text = address.substr(colon + 1);
        }
    }
    if (port_text.empty() && (address.empty() || address.back() != ':')) {
        if (default_port == 0)
            bad_address(address, "no port");
        out.port = default_port;
        return out;
    }
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || (value == 0 && !allow_port_zero) ||
        value > 65535)
        bad_address(address, "port '" + std::string(port_text) + "' is not a number in " +
                                 (allow_port_zero ? "0..65535" : "1..65535"));
    out.port = static_cast<std::uint16_t>(value);
    return out;
}

std::string socket_address::to_string() const {
    char text[INET6_ADDRSTRLEN] = "?";
    std::uint16_t port = 0;
    if (family() == AF_INET) {
        auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
        inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
        port = ntohs(in->sin_port);
        return std::string(text) + ":" + std::to_string(port);
    }
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    port = ntohs(in6->sin6_port);
    return "[" + std::string(text) + "]:" + std::to_string(port);
}

socket_address resolve(const host_port& where, bool passive) {
    if (where.host.empty() && !passive)
        throw std::invalid_argument("address ':" + std::to_string(where.port) + "': empty host");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo* result = nullptr;
    std::string port = std::to_string(where.port);
    int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), port.c_str(), &hints, &result);
    if (rc != 0) {
        std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
        // A name that does not resolve is not "no route to host": it gets
        // its own code, and the message is the resolver's, whole.
        throw std::system_error(make_error_code(errc::host_not_found),
                                "cannot resolve host '" + where.host + "' (getaddrinfo: " + why +
                                    "); check the name, or give an IP address");
    }
    socket_address out;
    // Prefer IPv4: RoCE GIDs for IPv4 are what most fabrics are set up with.
    const addrinfo* chosen = result;
    for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            chosen = ai;
            break;
        }
    std::memcpy(&out.storage, chosen->ai_addr, chosen->ai_addrlen);
    out.length = chosen->ai_addrlen;
    freeaddrinfo(result);
    return out;
}

}  // namespace cordma
