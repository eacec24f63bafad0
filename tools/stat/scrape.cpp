// scrape.hpp: an HTTP GET over a Unix socket or TCP, and the text
// format's sample lines.
#include "scrape.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace cordma_stat {

namespace {

std::runtime_error failed(const std::string& address, const std::string& what) {
    return std::runtime_error("cannot read the metrics at " + address + ": " + what);
}

int open_unix(const std::string& address, const std::string& path) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path)
        throw failed(address, "the path is too long for a Unix socket");
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    socklen_t len = sizeof sa;
    if (!path.empty() && path[0] == '@') {  // the abstract namespace
        sa.sun_path[0] = '\0';
        len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1 || connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == -1) {
        int err = errno;
        if (fd != -1)
            close(fd);
        throw failed(address, std::string("connect: ") + std::strerror(err) +
                                  " (is the program running, with CORDMA_METRICS or a metrics_endpoint there?)");
    }
    return fd;
}

int open_tcp(const std::string& address) {
    std::size_t colon = address.rfind(':');
    if (colon == std::string::npos)
        throw failed(address, "expected unix:/path, a path, or HOST:PORT");
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    int rc = getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &found);
    if (rc != 0)
        throw failed(address, gai_strerror(rc));
    int err = 0;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd != -1 && connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            freeaddrinfo(found);
            return fd;
        }
        err = errno;
        if (fd != -1)
            close(fd);
    }
    freeaddrinfo(found);
    throw failed(address, std::string("connect: ") + std::strerror(err) +
                              " (is the program running, with CORDMA_METRICS or a metrics_endpoint there?)");
}

}  // namespace

std::string fetch(const std::string& address, const std::string& path) {
    int fd = address.rfind("unix:", 0) == 0 ? open_unix(address, address.substr(5))
             : (!address.empty() && (address[0] == '/' || address[0] == '.')) ? open_unix(address, address)
                                                                               : open_tcp(address);
    std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
        close(fd);
        throw failed(address, "the request could not be sent");
    }
    std::string in;
    char buf[16384];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0) {
            close(fd);
            throw failed(address, "no answer within 5 s");
        }
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            int err = errno;
            close(fd);
            throw failed(address, std::string("recv: ") + std::strerror(err));
        }
        if (n == 0)
            break;
        in.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    std::size_t head_end = in.find("\r\n\r\n");
    if (in.rfind("HTTP/", 0) != 0 || head_end == std::string::npos)
        throw failed(address, "the answer is not HTTP (is it a cordma metrics endpoint?)");
    std::string status = in.substr(0, in.find("\r\n"));
    if (status.find(" 200 ") == std::string::npos)
        throw failed(address, path + ": " + status);
    return in.substr(head_end + 4);
}

std::vector<sample> parse(const std::string& page) {
    std::vector<sample> out;
    std::size_t pos = 0;
    int line_no = 0;
    while (pos < page.size()) {
        std::size_t end = page.find('\n', pos);
        std::string line = page.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        pos = end == std::string::npos ? page.size() : end + 1;
        ++line_no;
        if (line.empty() || line[0] == '#')
            continue;
        auto bad = [&] { return std::runtime_error("line " + std::to_string(line_no) + " is not a sample: " + line); };
        sample s;
        std::size_t i = line.find_first_of("{ ");
        if (i == std::string::npos)
            throw bad();
        s.name = line.substr(0, i);
        if (line[i] == '{') {
            ++i;
            while (i < line.size() && line[i] != '}') {
                std::size_t eq = line.find('=', i);
                if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
                    throw bad();
                std::string key = line.substr(i, eq - i);
                std::string value;
                std::size_t j = eq + 2;
                for (; j < line.size() && line[j] != '"'; ++j) {
                    if (line[j] == '\\' && j + 1 < line.size()) {
                        ++j;
                        value += line[j] == 'n' ? '\n' : line[j];
                    } else {
                        value += line[j];
                    }
                }
                if (j >= line.size())
                    throw bad();
                s.labels[key] = value;
                i = j + 1;
                if (i < line.size() && line[i] == ',')
                    ++i;
            }
            if (i >= line.size())
                throw bad();
            ++i;  // '}'
        }
        char* end_value = nullptr;
        const char* text = line.c_str() + i;
        s.value = std::strtod(text, &end_value);
        if (end_value == text)
            throw bad();
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace cordma_stat
