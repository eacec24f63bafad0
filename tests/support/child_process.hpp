#pragma once
// A program a test runs beside itself (a peer that is not cordma: rdmacm-utils'
// rdma_server, perftest's ib_send_bw, ...): found on PATH, its stdout and
// stderr collected through a pipe, and killed by a watchdog if it outlives
// its time limit, so a peer that hangs fails the test, with its output,
// instead of hanging it. A killed peer also breaks its RDMA connections, so
// the test's own side stops waiting too.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cordma::test {

struct process_result {
    std::string command;
    int status = 0;
    bool timed_out = false;  // the watchdog killed it
    std::string output;      // stdout and stderr, interleaved

    bool exited_ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
    /// "`rdma_server -p 7471` exited with status 0; its output: ..."
    std::string describe() const {
        std::string how = timed_out                ? "was killed after its time limit"
                          : WIFEXITED(status)      ? "exited with status " + std::to_string(WEXITSTATUS(status))
                          : WIFSIGNALED(status)    ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                   : "ended with wait status " + std::to_string(status);
        return "`" + command + "` " + how + "; its output:\n" + output;
    }
};

class child_process {
public:
    child_process(std::vector<std::string> args, std::chrono::seconds limit) {
        for (const auto& a : args)
            command_ += (command_.empty() ? "" : " ") + a;
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0)
            throw std::runtime_error("pipe2 for `" + command_ + "`: " + std::strerror(errno));
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        int rc = posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[1]);
        if (rc != 0) {
            ::close(fds[0]);
            throw std::runtime_error("cannot start `" + command_ + "`: " + std::strerror(rc) +
                                     " (is it installed? tools/install-deps installs it)");
        }
        out_ = fds[0];
        watchdog_ = std::thread([this, limit] {
            std::unique_lock lock(mutex_);
            if (!changed_.wait_for(lock, limit, [this] { return reaped_soon_; })) {
                timed_out_ = true;
                ::kill(pid_, SIGKILL);  // not reaped yet: the pid is still ours
            }
        });
    }
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    ~child_process() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            stop_watchdog();
            ::waitpid(pid_, nullptr, 0);
        }
        if (out_ >= 0)
            ::close(out_);
    }

    /// Kills it now (it is not expected to end by itself).
    void kill() const { ::kill(pid_, SIGKILL); }

    /// Reads its output until it exits (or the watchdog kills it), and reaps it.
    process_result finish() {
        process_result result;
        result.command = command_;
        char buffer[4096];
        for (;;) {
            ssize_t n = ::read(out_, buffer, sizeof buffer);
            if (n > 0) {
                result.output.append(buffer, static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            break;  // EOF: it exited (or closed its output, and exits soon)
        }
        stop_watchdog();
        ::waitpid(pid_, &result.status, 0);
        pid_ = -1;
        result.timed_out = timed_out_;
        return result;
    }

private:
    void stop_watchdog() {
        {
            std::lock_guard lock(mutex_);
            reaped_soon_ = true;
        }
        changed_.notify_all();
        if (watchdog_.joinable())
            watchdog_.join();
    }

    std::string command_;
    pid_t pid_ = -1;
    int out_ = -1;
    std::thread watchdog_;
    std::mutex mutex_;
    std::condition_variable changed_;
    bool reaped_soon_ = false;
    bool timed_out_ = false;
};

}  // namespace cordma::test
