#pragma once
// While a blocking_server runs: SIGINT and SIGTERM call a function of its
// choosing (on a thread of this object's, not in the signal handler).

#include <csignal>
#include <functional>
#include <thread>
#include <vector>

namespace cordma::rpc::detail {

class signal_stop {
public:
    /// Installs handlers for SIGINT and SIGTERM (but for one whose
    /// disposition is SIG_IGN, which stays ignored) and starts the thread
    /// that calls `on_signal(signal number)` for each signal caught. One at
    /// a time in a process: std::logic_error if another exists.
    explicit signal_stop(std::function<void(int)> on_signal);
    /// Restores the previous handlers, then stops and joins the thread.
    ~signal_stop();
    signal_stop(const signal_stop&) = delete;
    signal_stop& operator=(const signal_stop&) = delete;

private:
    void watch();

    struct saved {
        int signal;
        struct sigaction action;
    };
    std::function<void(int)> on_signal_;
    std::vector<saved> saved_;
    std::thread watcher_;
};

}  // namespace cordma::rpc::detail
