// metrics_endpoint.hpp: the socket, the thread that answers on it, and
// where it may listen (a Unix socket, or loopback only).
#include <cordma/metrics_endpoint.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "engine/metrics_http.hpp"

namespace cordma {

namespace {

[[noreturn]] void fail(int err, const std::string& what) { throw std::system_error(err, std::generic_category(), what); }

std::invalid_argument bad(std::string_view where, const std::string& why) {
    return std::invalid_argument("cordma::metrics_endpoint(\"" + std::string(where) + "\"): " + why);
}

// A request's whole head, read within 2 s (a client that says nothing
// does not hold the endpoint).
using deadline_clock = std::chrono::steady_clock;

/// Milliseconds left until `deadline` (0 once it has passed), for poll.
int left_ms(deadline_clock::time_point deadline) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - deadline_clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

/// The request, read until its blank line, 8 KiB, or `deadline`: a client
/// gets one deadline for the whole request, so one that sends a byte now
/// and then cannot hold the endpoint (or its destructor) longer.
std::string read_request(int fd, deadline_clock::time_point deadline) {
    std::string in;
    char buf[1024];
    while (in.size() < 8192 && in.find("\r\n\r\n") == std::string::npos && in.find("\n\n") == std::string::npos) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, left_ms(deadline)) <= 0)
            break;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0)
            break;
        in.append(buf, static_cast<std::size_t>(n));
    }
    return in;
}

/// The page, until the client has it all, goes, or `deadline` passes (a
/// client that reads slowly loses the rest of it).
void write_all(int fd, const std::string& out, deadline_clock::time_point deadline) {
    std::size_t done = 0;
    while (done < out.size()) {
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, left_ms(deadline)) <= 0)
            return;
        ssize_t n = send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0 && !(n == -1 && (errno == EAGAIN || errno == EINTR)))
            return;  // the client went
        if (n > 0)
            done += static_cast<std::size_t>(n);
    }
}

}  // namespace

struct metrics_endpoint::state {
    int listen_fd = -1;
    int stop_fd = -1;
    std::string address;
    std::string unix_path;  // removed at the end
    std::atomic<std::uint64_t> requests{0};
    std::thread thread;

    ~state() {
        if (listen_fd != -1)
            close(listen_fd);
        if (stop_fd != -1)
            close(stop_fd);
        if (!unix_path.empty())
            unlink(unix_path.c_str());
    }

    void bind_unix(std::string_view where, const std::string& path) {
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        if (path.size() >= sizeof sa.sun_path)
            throw bad(where, "a Unix socket path of " + std::to_string(path.size()) + " bytes; at most " +
                                 std::to_string(sizeof sa.sun_path - 1));
        std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
        listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listen_fd == -1)
            fail(errno, "cordma::metrics_endpoint: socket(AF_UNIX)");
        if (path[0] == '@') {
            // Linux's abstract namespace: no file, gone with the socket.
            sa.sun_path[0] = '\0';
            auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
            if (bind(listen_fd, reinterpret_cast<sockaddr*>(&sa), len) == -1)
                fail(errno, "cordma::metrics_endpoint: bind(" + path + ")" +
                                (errno == EADDRINUSE ? ": served already (by this process or another)" : ""));
            address = "unix:" + path;
            return;
        }
        if (bind(listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == -1) {
            int err = errno;
            struct stat st{};
            if (err != EADDRINUSE || stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
                fail(err, "cordma::metrics_endpoint: bind(" + path + ")");
            // A socket file: replaced if nobody answers on it (a process
            // that ended without removing it), kept if somebody does.
            int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            bool live = probe != -1 && connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
            if (probe != -1)
                close(probe);
            if (live)
                fail(EADDRINUSE, "cordma::metrics_endpoint: " + path + " is served already (by this process or another)");
            unlink(path.c_str());
            if (bind(listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == -1)
                fail(errno, "cordma::metrics_endpoint: bind(" + path + ")");
        }
        unix_path = path;
        address = "unix:" + path;
    }

    void bind_loopback(std::string_view where, std::string host, const std::string& port_text) {
        char* end = nullptr;
        errno = 0;
        unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
        if (port_text.empty() || *end != '\0' || errno != 0 || port > 65535)
            throw bad(where, "the port \"" + port_text + "\" is not a number from 0 to 65535");
        if (host == "localhost")
            host = "127.0.0.1";
        sockaddr_storage ss{};
        socklen_t len = 0;
        in_addr v4{};
        in6_addr v6{};
        if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
            if ((ntohl(v4.s_addr) >> 24) != 127)
                throw bad(where, host + " is not a loopback address: the endpoint serves on loopback only "
                                        "(127.0.0.0/8, [::1], localhost) or a Unix socket");
            auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
            sa->sin_family = AF_INET;
            sa->sin_addr = v4;
            sa->sin_port = htons(static_cast<std::uint16_t>(port));
            len = sizeof *sa;
        } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
            if (!IN6_IS_ADDR_LOOPBACK(&v6))
                throw bad(where, "[" + host + "] is not a loopback address: the endpoint serves on loopback only "
                                              "(127.0.0.0/8, [::1], localhost) or a Unix socket");
            auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
            sa->sin6_family = AF_INET6;
            sa->sin6_addr = v6;
            sa->sin6_port = htons(static_cast<std::uint16_t>(port));
            len = sizeof *sa;
        } else {
            throw bad(where, "\"" + host + "\" is not an address: give \"unix:/path\", \"127.0.0.1:PORT\", "
                                           "\"[::1]:PORT\" or \"localhost:PORT\"");
        }
        listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listen_fd == -1)
            fail(errno, "cordma::metrics_endpoint: socket()");
        int one = 1;
        setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(listen_fd, reinterpret_cast<sockaddr*>(&ss), len) == -1)
            fail(errno, "cordma::metrics_endpoint: bind(" + std::string(where) + ")");
        getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
        std::uint16_t bound = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                                      : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
        address = (ss.ss_family == AF_INET ? host : "[" + host + "]") + ":" + std::to_string(bound);
    }

    void serve() {
        for (;;) {
            pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
            if (poll(p, 2, -1) == -1) {
                if (errno == EINTR)
                    continue;
                return;
            }
            if (p[1].revents != 0)
                return;
            int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd == -1)
                continue;
            // One client at a time, each bounded: 2 s to send its request,
            // 2 s to take the page.
            std::string request = read_request(fd, deadline_clock::now() + std::chrono::seconds(2));
            try {
                std::string page = detail::metrics_response(request);
                write_all(fd, page, deadline_clock::now() + std::chrono::seconds(2));
            } catch (...) {
                // A page that could not be rendered (out of memory): the
                // client sees the connection close, the endpoint goes on.
            }
            requests.fetch_add(1, std::memory_order_relaxed);  // before the client sees the end
            close(fd);
        }
    }
};

metrics_endpoint::metrics_endpoint(std::string_view where) : state_(std::make_unique<state>()) {
    std::string w(where);
    if (w.rfind("unix:", 0) == 0) {
        if (w.size() == 5)
            throw bad(where, "no path after \"unix:\"");
        state_->bind_unix(where, w.substr(5));
    } else if (!w.empty() && (w[0] == '/' || w[0] == '.')) {
        state_->bind_unix(where, w);
    } else {
        std::size_t colon = w.rfind(':');
        if (colon == std::string::npos || colon == 0)
            throw bad(where, "expected \"unix:/path\", a path, or a loopback \"HOST:PORT\" "
                             "(\"127.0.0.1:9464\", \"[::1]:9464\", \"localhost:9464\")");
        std::string host = w.substr(0, colon);
        if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
            host = host.substr(1, host.size() - 2);
        state_->bind_loopback(where, host, w.substr(colon + 1));
    }
    if (listen(state_->listen_fd, 16) == -1)
        fail(errno, "cordma::metrics_endpoint: listen(" + state_->address + ")");
    state_->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (state_->stop_fd == -1)
        fail(errno, "cordma::metrics_endpoint: eventfd()");
    state_->thread = std::thread([s = state_.get()] { s->serve(); });
}

metrics_endpoint::~metrics_endpoint() {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(state_->stop_fd, &one, sizeof one);
    state_->thread.join();
}

const std::string& metrics_endpoint::address() const noexcept { return state_->address; }

std::uint64_t metrics_endpoint::requests() const noexcept {
    return state_->requests.load(std::memory_order_relaxed);
}

}  // namespace cordma
