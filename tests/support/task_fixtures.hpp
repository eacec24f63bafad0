#pragma once
// What the coroutine machinery's unit tests share (task_test, sync_wait_test,
// when_all_test, task_group_test): completions simulated the way cordma's
// event_listener delivers them (a fake_completion resumes the waiting
// coroutine inline on whichever thread calls complete(), and a thread_hopper
// resumes coroutines on fresh threads), a value type that counts its copies,
// a forked child for what ends in std::terminate, the coroutines under test,
// and a matcher of coroutine frame counts.

#include <atomic>
#include <coroutine>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

namespace task_fixtures {

using cordma::spawn_detached;
using cordma::task;
using cordma::when_all;

// ---------------------------------------------------------------------------
// Test helpers

/// Counts constructions, copies, moves and destructions, to show that results
/// are moved rather than copied and that every frame holding one is freed.
struct counted {
    static inline int constructions = 0;
    static inline int copies = 0;
    static inline int moves = 0;
    static inline int destructions = 0;

    static void reset() { constructions = copies = moves = destructions = 0; }
    static int alive() { return constructions + copies + moves - destructions; }

    explicit counted(int v = 0) : value(v) { ++constructions; }
    counted(const counted& other) : value(other.value) { ++copies; }
    counted(counted&& other) noexcept : value(other.value) { ++moves; }
    counted& operator=(const counted&) = delete;
    counted& operator=(counted&&) = delete;
    ~counted() { ++destructions; }

    int value;
};

/// Stands in for an RDMA completion. One coroutine at a time co_awaits it;
/// complete(value), called from any thread before or after that coroutine
/// suspends, resumes it inline on the completing thread, as the event_listener
/// does. Reusable: each co_await consumes one completion.
class fake_completion {
    enum state_t { idle, waiting, completed };

public:
    class awaiter {
    public:
        explicit awaiter(fake_completion& source) noexcept : source_(source) {}
        bool await_ready() const noexcept { return source_.state_.load(std::memory_order_acquire) == completed; }
        bool await_suspend(std::coroutine_handle<> waiter) noexcept {
            source_.waiter_ = waiter;
            state_t expected = idle;
            // Fails if complete() got in first: then resume at once.
            return source_.state_.compare_exchange_strong(expected, waiting, std::memory_order_acq_rel,
                                                          std::memory_order_acquire);
        }
        int await_resume() noexcept {
            int value = source_.value_;
            source_.state_.store(idle, std::memory_order_relaxed);
            return value;
        }

    private:
        fake_completion& source_;
    };

    awaiter operator co_await() noexcept { return awaiter{*this}; }

    void complete(int value) {
        value_ = value;
        if (state_.exchange(completed, std::memory_order_acq_rel) == waiting)
            waiter_.resume();
    }

    bool has_waiter() const noexcept { return state_.load(std::memory_order_acquire) == waiting; }

private:
    std::atomic<state_t> state_{idle};
    std::coroutine_handle<> waiter_;
    int value_ = 0;
};

/// co_await hopper.hop() resumes the coroutine on a new std::thread. The
/// destructor joins every thread it started.
class thread_hopper {
public:
    thread_hopper() = default;
    thread_hopper(const thread_hopper&) = delete;
    thread_hopper& operator=(const thread_hopper&) = delete;
    ~thread_hopper() { join_all(); }

    auto hop() noexcept {
        struct awaiter {
            thread_hopper& hopper;
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> c) { hopper.launch(c); }
            void await_resume() const noexcept {}
        };
        return awaiter{*this};
    }

    void join_all() {
        // Resumed coroutines may hop again, adding threads while we join.
        for (;;) {
            std::vector<std::thread> batch;
            {
                std::lock_guard lock{mutex_};
                batch.swap(threads_);
            }
            if (batch.empty())
                return;
            for (auto& t : batch)
                t.join();
        }
    }

private:
    void launch(std::coroutine_handle<> c) {
        std::lock_guard lock{mutex_};
        threads_.emplace_back([c] { c.resume(); });
    }

    std::mutex mutex_;
    std::vector<std::thread> threads_;
};

/// How a task started with start() ended.
struct outcome {
    std::atomic<bool> done{false};
    std::exception_ptr error;
};

inline task<> record_outcome(task<> work, outcome& out) {
    try {
        co_await std::move(work);
    } catch (...) {
        out.error = std::current_exception();
    }
    out.done.store(true, std::memory_order_release);
}

/// Runs `work` now, on this thread, until it first suspends; `out` says when
/// and how it finished. Lets a test drive a coroutine step by step.
inline void start(task<> work, outcome& out) { spawn_detached(record_outcome(std::move(work), out)); }

inline std::string message_of(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const std::exception& e) {
        return e.what();
    }
}

/// Runs `body` in a forked child with stderr captured, for behaviour that ends
/// in std::terminate.
struct child_exit {
    bool aborted = false;
    std::string stderr_text;
};

template <class Body>
child_exit run_in_child_process(Body body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(fds[1], STDERR_FILENO);
        ::close(fds[0]);
        ::close(fds[1]);
        // Catch reports fatal signals as test failures; here SIGABRT is the
        // expected outcome, so let it kill the child quietly.
        std::signal(SIGABRT, SIG_DFL);
        ::alarm(10);  // a hang must not hang the test run
        body();
        std::_Exit(0);
    }
    ::close(fds[1]);
    child_exit result;
    char buffer[512];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0)
        result.stderr_text.append(buffer, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    return result;
}

// ---------------------------------------------------------------------------
// Coroutines under test: free functions, or lambdas that take everything as
// parameters. Never capturing lambdas: a lazy task outlives the
// full-expression that created it, and the lambda object holding the captures
// would not.

inline task<int> answer() { co_return 42; }

inline task<int> value(int v) { co_return v; }

inline task<> set_flag(bool& flag) {
    flag = true;
    co_return;
}

inline task<int&> ref_to(int& x) { co_return x; }

inline task<std::unique_ptr<int>> make_unique_int(int v) { co_return std::make_unique<int>(v); }

inline task<std::pair<int, std::string>> make_pair_braced() { co_return {1, "one"}; }

inline task<int> fail_with(std::string message) {
    throw std::runtime_error(message);
    co_return 0;
}

inline task<> fail_void(std::string message) {
    throw std::runtime_error(message);
    co_return;
}

inline task<int&> fail_ref(std::string message) {
    static int never_returned = 0;
    throw std::runtime_error(message);
    co_return never_returned;
}

inline task<int> recover_from_failure() {
    try {
        co_await fail_with("caught");
    } catch (const std::runtime_error&) {
        co_return -1;
    }
    co_return 0;
}

inline task<int> plus_one(task<int> inner) { co_return 1 + co_await std::move(inner); }

inline task<int> wait_for(fake_completion& source) { co_return co_await source; }

inline task<> wait_void(fake_completion& source) { co_await source; }

inline task<int> wait_then_fail(fake_completion& source, std::string message) {
    co_await source;
    throw std::runtime_error(message);
}

inline task<> wait_then_fail_void(fake_completion& source, std::string message) {
    co_await source;
    throw std::runtime_error(message);
}

inline task<int> sum_of_completions(fake_completion& source, int count) {
    int sum = 0;
    for (int i = 0; i < count; ++i)
        sum += co_await source;
    co_return sum;
}

inline task<> store_in(task<int> work, int& result) { result = co_await std::move(work); }

inline task<int> hop_then(thread_hopper& hopper, int v) {
    co_await hopper.hop();
    co_return v;
}

inline task<> hop_then_fail(thread_hopper& hopper, std::string message) {
    co_await hopper.hop();
    throw std::runtime_error(message);
}

inline task<std::thread::id> hop_and_report_thread(thread_hopper& hopper) {
    co_await hopper.hop();
    co_return std::this_thread::get_id();
}

inline task<counted> make_counted(int v) { co_return counted{v}; }

inline task<int> read_counted(counted c) { co_return c.value; }

inline task<int> await_counted(int v) {
    counted c = co_await make_counted(v);
    co_return c.value;
}

inline task<int> read_counted_then_fail(counted c) {
    throw std::runtime_error(std::to_string(c.value));
    co_return 0;
}

inline task<int> wait_holding_counted(counted c, fake_completion& source) { co_return c.value + co_await source; }

// GCC performs symmetric transfer as a sibling call in the awaiting
// coroutine's body. AddressSanitizer's stack instrumentation makes such calls
// ineligible, so under ASan these stack-depth tests would measure the
// sanitizer, not cordma; the coroutines they drive opt out of it (heap checks
// stay on). ThreadSanitizer's function hooks rule the tail calls out too: run
// TSan builds with the test spec ~[stack].
#define CORDMA_TEST_KEEP_TAIL_CALLS __attribute__((no_sanitize_address))

CORDMA_TEST_KEEP_TAIL_CALLS inline task<int> one() { co_return 1; }

CORDMA_TEST_KEEP_TAIL_CALLS inline task<std::size_t> count_synchronous_completions(std::size_t n) {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < n; ++i)
        sum += static_cast<std::size_t>(co_await one());
    co_return sum;
}

CORDMA_TEST_KEEP_TAIL_CALLS inline task<std::size_t> nest(std::size_t depth) {
    if (depth == 0)
        co_return 0;
    co_return 1 + co_await nest(depth - 1);
}

inline task<std::size_t> count_synchronous_when_alls(std::size_t n) {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
        auto [a, b] = co_await when_all(one(), one());
        sum += static_cast<std::size_t>(a + b);
    }
    co_return sum;
}

/// Matches a count of coroutine frame allocations (or deallocations). GCC
/// allocates every frame it is asked for; Clang may elide a frame's allocation
/// when it can see the frame never outlives its creator (HALO). So the count
/// is exact under GCC and an upper bound under Clang.
class frame_count : public Catch::MatcherBase<std::uint64_t> {
public:
    explicit frame_count(std::uint64_t expected) : expected_(expected) {}

    bool match(const std::uint64_t& actual) const override {
#if defined(__clang__)
        return actual <= expected_;
#else
        return actual == expected_;
#endif
    }

    std::string describe() const override {
#if defined(__clang__)
        return "is at most " + std::to_string(expected_) + " (Clang may elide frames)";
#else
        return "is exactly " + std::to_string(expected_);
#endif
    }

private:
    std::uint64_t expected_;
};

}  // namespace task_fixtures
