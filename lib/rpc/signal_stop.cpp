// cordma::rpc::detail::signal_stop. The signal handler may run on any thread
// of the process (cordma's event listener, a handler's, the user's), at any
// moment, so it does only what is async-signal-safe: it stores the signal
// number in a lock-free atomic and writes to an eventfd. The eventfd is made
// once and never closed, so a handler that loaded its number just before
// the handlers were restored never writes to a descriptor reused since.
// The watcher thread polls it and does the rest (stop_source::request_stop
// takes locks and may resume coroutines: never inside a handler).
#include "rpc/signal_stop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <system_error>

namespace cordma::rpc::detail {

namespace {

std::atomic<int> caught{0};        // the last signal caught, until the watcher takes it
std::atomic<bool> quitting{false};  // the watcher's cue to end
std::atomic<bool> installed{false}; // one signal_stop at a time
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

int wake_fd() {
    static int fd = [] {
        int made = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (made < 0)
            throw std::system_error(errno, std::generic_category(), "cordma::rpc::blocking_server: eventfd");
        return made;
    }();
    return fd;
}
std::atomic<int> handler_fd{-1};  // wake_fd(), once made: read by the handler

void wake(int fd) noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(fd, &one, sizeof one);
}

extern "C" void on_stop_signal(int signal) {
    int saved_errno = errno;
    caught.store(signal, std::memory_order_relaxed);
    int fd = handler_fd.load(std::memory_order_relaxed);
    if (fd >= 0)
        wake(fd);
    errno = saved_errno;
}

}  // namespace

signal_stop::signal_stop(std::function<void(int)> on_signal) : on_signal_(std::move(on_signal)) {
    if (installed.exchange(true))
        throw std::logic_error("cordma::rpc::blocking_server::run: another server's run() handles SIGINT and SIGTERM "
                               "now; give this one blocking_server_options::handle_signals = false");
    try {
        int fd = wake_fd();
        handler_fd.store(fd);
        // What a signal left behind after the last run was over.
        std::uint64_t count;
        while (read(fd, &count, sizeof count) > 0) {
        }
        caught.store(0);
        quitting.store(false);
        for (int signal : {SIGINT, SIGTERM}) {
            saved s{signal, {}};
            if (sigaction(signal, nullptr, &s.action) != 0)
                throw std::system_error(errno, std::generic_category(), "sigaction");
            if (s.action.sa_handler == SIG_IGN)
                continue;
            struct sigaction mine {};
            mine.sa_handler = on_stop_signal;
            sigemptyset(&mine.sa_mask);
            mine.sa_flags = SA_RESTART;
            if (sigaction(signal, &mine, nullptr) != 0)
                throw std::system_error(errno, std::generic_category(), "sigaction");
            saved_.push_back(s);
        }
        watcher_ = std::thread([this] { watch(); });
    } catch (...) {
        for (auto& s : saved_)
            sigaction(s.signal, &s.action, nullptr);
        installed.store(false);
        throw;
    }
}

signal_stop::~signal_stop() {
    for (auto& s : saved_)
        sigaction(s.signal, &s.action, nullptr);
    quitting.store(true);
    wake(wake_fd());
    watcher_.join();
    installed.store(false);
}

void signal_stop::watch() {
    pollfd p{.fd = wake_fd(), .events = POLLIN, .revents = 0};
    for (;;) {
        if (poll(&p, 1, -1) < 0)
            continue;  // EINTR: a signal landed on this thread
        std::uint64_t count;
        while (read(p.fd, &count, sizeof count) > 0) {
        }
        if (int signal = caught.exchange(0); signal != 0)
            on_signal_(signal);
        if (quitting.load())
            return;
    }
}

}  // namespace cordma::rpc::detail
