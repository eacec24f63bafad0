// stuck_dump.hpp: the signal, a pipe, and the thread that writes the
// report when a byte arrives on it.
#include "engine/stuck_dump.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <cordma/stuck_report.hpp>

#include "log/logf.hpp"

namespace cordma::detail {

namespace {

int dump_pipe[2] = {-1, -1};

void on_signal(int) {
    int saved = errno;
    char one = 1;
    [[maybe_unused]] ssize_t n = write(dump_pipe[1], &one, 1);  // full: a dump is due already
    errno = saved;
}

int signal_number(const std::string& name) {
    static const struct {
        const char* name;
        int number;
    } known[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT},
                 {"PWR", SIGPWR},   {"URG", SIGURG},   {"WINCH", SIGWINCH}};
    std::string bare = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
    for (const auto& k : known)
        if (bare == k.name)
            return k.number;
    char* end = nullptr;
    long n = std::strtol(name.c_str(), &end, 10);
    if (!name.empty() && *end == '\0' && n > 0 && n < NSIG)
        return static_cast<int>(n);
    return 0;
}

void dump_loop() {
    for (;;) {
        char byte;
        ssize_t n = read(dump_pipe[0], &byte, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        std::string text = to_text(process_stuck(50));
        if (!text.empty() && text.back() == '\n')
            text.pop_back();
        logf(log_level::warning, "cordma: stuck report (CORDMA_DUMP_ON):\n%s", text.c_str());
    }
}

}  // namespace

void start_environment_stuck_dump() {
    // Once; a failure throws and leaves it to be tried again (call_once).
    static std::once_flag once;
    std::call_once(once, [] {
        const char* value = std::getenv("CORDMA_DUMP_ON");
        if (value == nullptr || *value == '\0')
            return;
        int sig = signal_number(value);
        if (sig == 0 || sig == SIGKILL || sig == SIGSTOP)
            throw std::invalid_argument(std::string("CORDMA_DUMP_ON=") + value +
                                        ": not a signal cordma can take; give one such as SIGUSR2 (or USR2, or its "
                                        "number), not SIGKILL or SIGSTOP");
        if (dump_pipe[0] == -1 && pipe2(dump_pipe, O_CLOEXEC) != 0)
            throw std::invalid_argument(std::string("CORDMA_DUMP_ON=") + value + ": pipe2: " + std::strerror(errno));
        fcntl(dump_pipe[1], F_SETFL, O_NONBLOCK);
        struct sigaction sa{};
        sa.sa_handler = &on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        if (sigaction(sig, &sa, nullptr) != 0)
            throw std::invalid_argument(std::string("CORDMA_DUMP_ON=") + value + ": sigaction: " +
                                        std::strerror(errno));
        // Detached: it waits in read() until the process ends.
        std::thread(dump_loop).detach();
    });
}

}  // namespace cordma::detail
