#pragma once
// The peer program (tests/support/peer.cpp), started as a separate process
// from the path in CORDMA_TEST_PEER (tests/meson.build sets it). Killed and
// reaped when it goes out of scope, so a failed test leaves nothing behind.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

extern char** environ;

namespace cordma::test {

struct peer_process {
    pid_t pid = -1;

    /// Stops the process (SIGSTOP) and returns once it is stopped: kill()
    /// only sends the signal, and a peer's thread still running for a
    /// moment could answer what the caller sends next.
    void stop() {
        REQUIRE(kill(pid, SIGSTOP) == 0);
        int status = 0;
        REQUIRE(waitpid(pid, &status, WUNTRACED) == pid);
        REQUIRE(WIFSTOPPED(status));
    }
    /// Continues a stopped process (SIGCONT).
    void resume() { REQUIRE(kill(pid, SIGCONT) == 0); }
    /// Runs the program named by the environment variable `program`
    /// (tests/meson.build sets CORDMA_TEST_PEER and CORDMA_TEST_GROUP_PEER).
    explicit peer_process(std::vector<std::string> args, const char* program = "CORDMA_TEST_PEER") {
        const char* path = std::getenv(program);
        INFO("environment variable " << program);
        REQUIRE(path != nullptr);
        args.insert(args.begin(), path);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        REQUIRE(posix_spawn(&pid, path, nullptr, nullptr, argv.data(), environ) == 0);
    }
    peer_process(const peer_process&) = delete;
    peer_process& operator=(const peer_process&) = delete;
    int wait() {
        int status = 0;
        waitpid(pid, &status, 0);
        pid = -1;
        return status;
    }
    /// SIGKILL now, and reap it (a crash, for the tests of dying peers).
    void kill_now() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
            pid = -1;
        }
    }
    ~peer_process() {
        if (pid > 0) {
            kill(pid, SIGCONT);  // a stopped process dies only once continued
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }
};

}  // namespace cordma::test
