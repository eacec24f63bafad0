// Unit tests for the coroutine machinery: task, sync_wait, when_all,
// task_group and spawn_detached. Pure logic, no RDMA device needed.
//
// Completions are simulated the way cordma's event_listener delivers them: a
// fake_completion resumes the waiting coroutine inline on whichever thread
// calls complete(), and a thread_hopper resumes coroutines on fresh threads.

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"

#include <atomic>
#include <chrono>
#include <coroutine>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

using cordma::spawn_detached;
using cordma::sync_wait;
using cordma::task;
using cordma::task_group;
using cordma::when_all;
using cordma::testing::allocation_counter;

// The type-level contract.
static_assert(!std::is_copy_constructible_v<task<int>>, "a task is move-only");
static_assert(std::is_nothrow_move_constructible_v<task<int>>);
static_assert(std::is_nothrow_move_assignable_v<task<int>>);
static_assert(sizeof(task<int>) == sizeof(void*), "a task is just its frame's handle");
static_assert(cordma::detail::awaitable<task<int>>);
static_assert(!cordma::detail::awaitable<task<int>&>, "awaiting consumes a task: co_await std::move(t)");
static_assert(std::is_same_v<cordma::detail::await_result_t<task<int>>, int>);
static_assert(std::is_same_v<cordma::detail::await_result_t<task<int&>>, int&>);
static_assert(std::is_same_v<cordma::detail::await_result_t<task<>>, void>);

namespace {

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

task<> record_outcome(task<> work, outcome& out) {
    try {
        co_await std::move(work);
    } catch (...) {
        out.error = std::current_exception();
    }
    out.done.store(true, std::memory_order_release);
}

/// Runs `work` now, on this thread, until it first suspends; `out` says when
/// and how it finished. Lets a test drive a coroutine step by step.
void start(task<> work, outcome& out) { spawn_detached(record_outcome(std::move(work), out)); }

std::string message_of(const std::exception_ptr& error) {
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

task<int> answer() { co_return 42; }

task<int> value(int v) { co_return v; }

task<> set_flag(bool& flag) {
    flag = true;
    co_return;
}

task<int&> ref_to(int& x) { co_return x; }

task<std::unique_ptr<int>> make_unique_int(int v) { co_return std::make_unique<int>(v); }

task<std::pair<int, std::string>> make_pair_braced() { co_return {1, "one"}; }

task<int> fail_with(std::string message) {
    throw std::runtime_error(message);
    co_return 0;
}

task<> fail_void(std::string message) {
    throw std::runtime_error(message);
    co_return;
}

task<int&> fail_ref(std::string message) {
    static int never_returned = 0;
    throw std::runtime_error(message);
    co_return never_returned;
}

task<int> recover_from_failure() {
    try {
        co_await fail_with("caught");
    } catch (const std::runtime_error&) {
        co_return -1;
    }
    co_return 0;
}

task<int> plus_one(task<int> inner) { co_return 1 + co_await std::move(inner); }

task<int> wait_for(fake_completion& source) { co_return co_await source; }

task<> wait_void(fake_completion& source) { co_await source; }

task<int> wait_then_fail(fake_completion& source, std::string message) {
    co_await source;
    throw std::runtime_error(message);
}

task<> wait_then_fail_void(fake_completion& source, std::string message) {
    co_await source;
    throw std::runtime_error(message);
}

task<int> sum_of_completions(fake_completion& source, int count) {
    int sum = 0;
    for (int i = 0; i < count; ++i)
        sum += co_await source;
    co_return sum;
}

task<> store_in(task<int> work, int& result) { result = co_await std::move(work); }

task<int> hop_then(thread_hopper& hopper, int v) {
    co_await hopper.hop();
    co_return v;
}

task<> hop_then_fail(thread_hopper& hopper, std::string message) {
    co_await hopper.hop();
    throw std::runtime_error(message);
}

task<std::thread::id> hop_and_report_thread(thread_hopper& hopper) {
    co_await hopper.hop();
    co_return std::this_thread::get_id();
}

task<counted> make_counted(int v) { co_return counted{v}; }

task<int> read_counted(counted c) { co_return c.value; }

task<int> await_counted(int v) {
    counted c = co_await make_counted(v);
    co_return c.value;
}

task<int> read_counted_then_fail(counted c) {
    throw std::runtime_error(std::to_string(c.value));
    co_return 0;
}

task<int> wait_holding_counted(counted c, fake_completion& source) { co_return c.value + co_await source; }

// GCC performs symmetric transfer as a sibling call in the awaiting
// coroutine's body. AddressSanitizer's stack instrumentation makes such calls
// ineligible, so under ASan these stack-depth tests would measure the
// sanitizer, not cordma; the coroutines they drive opt out of it (heap checks
// stay on). ThreadSanitizer's function hooks rule the tail calls out too: run
// TSan builds with the test spec ~[stack].
#define CORDMA_TEST_KEEP_TAIL_CALLS __attribute__((no_sanitize_address))

CORDMA_TEST_KEEP_TAIL_CALLS task<int> one() { co_return 1; }

CORDMA_TEST_KEEP_TAIL_CALLS task<std::size_t> count_synchronous_completions(std::size_t n) {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < n; ++i)
        sum += static_cast<std::size_t>(co_await one());
    co_return sum;
}

CORDMA_TEST_KEEP_TAIL_CALLS task<std::size_t> nest(std::size_t depth) {
    if (depth == 0)
        co_return 0;
    co_return 1 + co_await nest(depth - 1);
}

task<std::size_t> count_synchronous_when_alls(std::size_t n) {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
        auto [a, b] = co_await when_all(one(), one());
        sum += static_cast<std::size_t>(a + b);
    }
    co_return sum;
}

}  // namespace

// ---------------------------------------------------------------------------
// task

TEST_CASE("a task does not start until it is awaited", "[task]") {
    bool ran = false;
    auto t = set_flag(ran);
    CHECK(t.valid());
    CHECK_FALSE(ran);

    SECTION("awaiting it runs the body and consumes the task") {
        sync_wait(std::move(t));
        CHECK(ran);
        CHECK_FALSE(t.valid());
    }
    SECTION("moving it does not start it") {
        auto moved = std::move(t);
        CHECK_FALSE(t.valid());
        CHECK(moved.valid());
        CHECK_FALSE(ran);
    }
    SECTION("destroying it unawaited never runs the body") {
        { auto dropped = std::move(t); }
        CHECK_FALSE(ran);
    }
}

TEST_CASE("awaiting a task yields what its body returned", "[task]") {
    SECTION("a value") { CHECK(sync_wait(answer()) == 42); }
    SECTION("a move-only value") {
        std::unique_ptr<int> p = sync_wait(make_unique_int(7));
        REQUIRE(p != nullptr);
        CHECK(*p == 7);
    }
    SECTION("a value built from a braced list") {
        CHECK(sync_wait(make_pair_braced()) == std::pair<int, std::string>{1, "one"});
    }
    SECTION("a reference to the very object returned") {
        int x = 1;
        int& r = sync_wait(ref_to(x));
        CHECK(&r == &x);
    }
    SECTION("nothing, for task<void>") {
        bool ran = false;
        sync_wait(set_flag(ran));
        CHECK(ran);
    }
    SECTION("a value passed up through several awaiting tasks") {
        CHECK(sync_wait(plus_one(plus_one(answer()))) == 44);
    }
}

TEST_CASE("an exception escaping a task is rethrown to its awaiter", "[task]") {
    SECTION("from a task<int>") { CHECK_THROWS_WITH(sync_wait(fail_with("int")), "int"); }
    SECTION("from a task<void>") { CHECK_THROWS_WITH(sync_wait(fail_void("void")), "void"); }
    SECTION("from a task<int&>") { CHECK_THROWS_WITH(sync_wait(fail_ref("ref")), "ref"); }
    SECTION("through several awaiting tasks") { CHECK_THROWS_WITH(sync_wait(plus_one(plus_one(fail_with("deep")))), "deep"); }
    SECTION("the awaiting coroutine can catch it and carry on") { CHECK(sync_wait(recover_from_failure()) == -1); }
    SECTION("after the task was resumed on another thread") {
        thread_hopper hopper;
        CHECK_THROWS_WITH(sync_wait(hop_then_fail(hopper, "remote")), "remote");
    }
}


TEST_CASE("a task's result is moved to its awaiter, never copied", "[task]") {
    counted::reset();

    SECTION("inside a coroutine: one move into the frame, one out of it") {
        CHECK(sync_wait(await_counted(5)) == 5);
        CHECK(counted::constructions == 1);
        CHECK(counted::copies == 0);
        CHECK(counted::moves == 2);
        CHECK(counted::alive() == 0);
    }
    SECTION("through sync_wait") {
        {
            counted c = sync_wait(make_counted(9));
            CHECK(c.value == 9);
            CHECK(counted::copies == 0);
            CHECK(counted::alive() == 1);
        }
        CHECK(counted::alive() == 0);
    }
}

TEST_CASE("a task's frame is destroyed exactly once", "[task]") {
    counted::reset();

    SECTION("when the task is destroyed before it starts") {
        {
            auto t = read_counted(counted{1});
            CHECK(counted::alive() == 1);  // the parameter, in the frame
        }
        CHECK(counted::alive() == 0);
    }
    SECTION("when the task has been awaited") {
        CHECK(sync_wait(read_counted(counted{2})) == 2);
        CHECK(counted::alive() == 0);
    }
    SECTION("when the task finished by throwing") {
        CHECK_THROWS_WITH(sync_wait(read_counted_then_fail(counted{3})), "3");
        CHECK(counted::alive() == 0);
    }
    SECTION("when the task it was moved into is destroyed, and not before") {
        auto t = read_counted(counted{4});
        {
            auto moved = std::move(t);
            CHECK(counted::alive() == 1);
        }
        CHECK(counted::alive() == 0);
    }
    SECTION("when another task is move-assigned over it") {
        auto t = read_counted(counted{5});
        t = read_counted(counted{6});
        CHECK(counted::alive() == 1);
        CHECK(sync_wait(std::move(t)) == 6);
        CHECK(counted::alive() == 0);
    }
    SECTION("when it finished on another thread") {
        fake_completion source;
        int result = 0;
        outcome out;
        start(store_in(wait_holding_counted(counted{7}, source), result), out);
        CHECK(counted::alive() == 1);
        std::thread completer{[&] { source.complete(1); }};
        completer.join();
        CHECK(out.done);
        CHECK(result == 8);
        CHECK(counted::alive() == 0);
    }
}

TEST_CASE("1,000,000 synchronous completions in a row don't overflow the stack", "[task][stack]") {
    // Without symmetric transfer every iteration would nest two resume()
    // calls on the stack: about 100 MB for a million, far past the default
    // 8 MiB.
    CHECK(sync_wait(count_synchronous_completions(1'000'000)) == 1'000'000);
}

TEST_CASE("100,000 nested tasks awaiting each other don't overflow the stack", "[task][stack]") {
    // Each level starts the next by symmetric transfer on the way down, and
    // resumes its awaiter by symmetric transfer on the way up.
    CHECK(sync_wait(nest(100'000)) == 100'000);
}

TEST_CASE("a task completed on another thread resumes its awaiter on that thread", "[task]") {
    thread_hopper hopper;
    const auto main_thread = std::this_thread::get_id();
    const auto resumed_on = sync_wait(hop_and_report_thread(hopper));
    CHECK(resumed_on != main_thread);
}

// ---------------------------------------------------------------------------
// sync_wait

TEST_CASE("sync_wait returns the awaitable's result once it completes", "[sync_wait]") {
    SECTION("a task that completes synchronously") { CHECK(sync_wait(answer()) == 42); }
    SECTION("a task completed later by another thread") {
        fake_completion source;
        std::atomic<bool> completing{false};
        std::thread completer{[&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            completing = true;
            source.complete(17);
        }};
        CHECK(sync_wait(wait_for(source)) == 17);
        CHECK(completing);  // did not return before the completion
        completer.join();
    }
    SECTION("completions racing the awaiter's suspension, 1,000 times") {
        // The completing thread sometimes gets in before the coroutine has
        // suspended, sometimes after: both must wake sync_wait exactly once.
        for (int i = 0; i < 1000; ++i) {
            fake_completion source;
            std::thread completer{[&source, i] { source.complete(i); }};
            const int got = sync_wait(wait_for(source));
            completer.join();
            REQUIRE(got == i);
        }
    }
    SECTION("an exception, rethrown on the calling thread") {
        thread_hopper hopper;
        CHECK_THROWS_AS(sync_wait(hop_then_fail(hopper, "far away")), std::runtime_error);
    }
    SECTION("a reference") {
        int x = 3;
        CHECK(&sync_wait(ref_to(x)) == &x);
    }
    SECTION("an awaitable that is not a task") {
        sync_wait(std::suspend_never{});
        fake_completion source;
        source.complete(5);
        CHECK(sync_wait(source) == 5);  // an lvalue awaitable, awaited in place
    }
}

// ---------------------------------------------------------------------------
// when_all

TEST_CASE("when_all yields every child's result in argument order", "[when_all]") {
    int x = 0;
    bool ran = false;
    auto [a, b, c, d] = sync_wait(when_all(answer(), set_flag(ran), ref_to(x), make_unique_int(3)));
    CHECK(a == 42);
    static_assert(std::is_same_v<decltype(b), std::monostate>, "void becomes std::monostate");
    CHECK(ran);
    CHECK(&c == &x);
    REQUIRE(d != nullptr);
    CHECK(*d == 3);

    SECTION("with no children it completes at once") {
        CHECK(sync_wait(when_all()) == std::tuple<>{});
    }
    SECTION("children passed as named tasks are moved in") {
        auto first = value(1);
        auto second = value(2);
        CHECK(sync_wait(when_all(std::move(first), std::move(second))) == std::tuple{1, 2});
        CHECK_FALSE(first.valid());
    }
}

TEST_CASE("when_all starts every child before waiting for any", "[when_all]") {
    fake_completion first;
    fake_completion second;
    std::tuple<int, int> results;
    outcome out;
    start([](fake_completion& a, fake_completion& b, std::tuple<int, int>& into) -> task<> {
        into = co_await when_all(wait_for(a), wait_for(b));
    }(first, second, results), out);

    // Both children ran up to their suspension; the awaiter waits for both.
    CHECK(first.has_waiter());
    CHECK(second.has_waiter());
    CHECK_FALSE(out.done);

    second.complete(2);
    CHECK_FALSE(out.done);
    first.complete(1);
    CHECK(out.done);
    CHECK_FALSE(out.error);
    CHECK(results == std::tuple{1, 2});
}

TEST_CASE("when_all lets every child finish, then rethrows the first failure", "[when_all]") {
    fake_completion first;
    fake_completion second;
    outcome out;

    SECTION("a synchronous failure does not stop the other children") {
        start([](fake_completion& b) -> task<> { co_await when_all(fail_with("early"), wait_for(b)); }(second), out);
        CHECK(second.has_waiter());
        CHECK_FALSE(out.done);
        second.complete(0);
        REQUIRE(out.done);
        REQUIRE(out.error);
        CHECK(message_of(out.error) == "early");
    }
    SECTION("of several failures, the first in argument order wins") {
        start([](fake_completion& a, fake_completion& b) -> task<> {
            co_await when_all(wait_then_fail(a, "first"), wait_then_fail(b, "second"));
        }(first, second), out);
        second.complete(0);
        CHECK_FALSE(out.done);
        first.complete(0);
        REQUIRE(out.done);
        REQUIRE(out.error);
        CHECK(message_of(out.error) == "first");
    }
    SECTION("a failing void child") {
        CHECK_THROWS_WITH(sync_wait(when_all(answer(), fail_void("void"))), "void");
    }
}

TEST_CASE("when_all of a vector yields a vector of results in order", "[when_all]") {
    SECTION("values") {
        std::vector<task<int>> tasks;
        for (int i = 0; i < 5; ++i)
            tasks.push_back(value(i));
        CHECK(sync_wait(when_all(std::move(tasks))) == std::vector<int>{0, 1, 2, 3, 4});
    }
    SECTION("move-only values") {
        std::vector<task<std::unique_ptr<int>>> tasks;
        tasks.push_back(make_unique_int(1));
        tasks.push_back(make_unique_int(2));
        auto values = sync_wait(when_all(std::move(tasks)));
        REQUIRE(values.size() == 2);
        CHECK(*values[0] == 1);
        CHECK(*values[1] == 2);
    }
    SECTION("references, as std::reference_wrapper") {
        int x = 0;
        int y = 0;
        std::vector<task<int&>> tasks;
        tasks.push_back(ref_to(x));
        tasks.push_back(ref_to(y));
        auto refs = sync_wait(when_all(std::move(tasks)));
        REQUIRE(refs.size() == 2);
        CHECK(&refs[0].get() == &x);
        CHECK(&refs[1].get() == &y);
    }
    SECTION("void children give void") {
        bool ran[3] = {false, false, false};
        std::vector<task<>> tasks;
        for (bool& flag : ran)
            tasks.push_back(set_flag(flag));
        static_assert(std::is_void_v<decltype(sync_wait(when_all(std::move(tasks))))>);
        sync_wait(when_all(std::move(tasks)));
        CHECK((ran[0] && ran[1] && ran[2]));
    }
    SECTION("an empty vector completes at once") {
        CHECK(sync_wait(when_all(std::vector<task<int>>{})).empty());
    }
    SECTION("children suspended at once, completed in reverse order") {
        fake_completion sources[3];
        std::vector<int> results;
        outcome out;
        start([](fake_completion* s, std::vector<int>& into) -> task<> {
            std::vector<task<int>> tasks;
            for (int i = 0; i < 3; ++i)
                tasks.push_back(wait_for(s[i]));
            into = co_await when_all(std::move(tasks));
        }(sources, results), out);
        CHECK((sources[0].has_waiter() && sources[1].has_waiter() && sources[2].has_waiter()));
        sources[2].complete(30);
        sources[1].complete(20);
        CHECK_FALSE(out.done);
        sources[0].complete(10);
        CHECK(out.done);
        CHECK(results == std::vector<int>{10, 20, 30});
    }
    SECTION("the first failure in order is rethrown after all finished") {
        std::vector<task<int>> tasks;
        tasks.push_back(value(0));
        tasks.push_back(fail_with("one"));
        tasks.push_back(fail_with("two"));
        CHECK_THROWS_WITH(sync_wait(when_all(std::move(tasks))), "one");
    }
}

TEST_CASE("when_all's children may finish on other threads", "[when_all]") {
    // Many rounds, so that children finishing concurrently with each other and
    // with the awaiter's own suspension all happen.
    SECTION("vector") {
        for (int round = 0; round < 200; ++round) {
            thread_hopper hopper;
            std::vector<task<int>> tasks;
            for (int i = 0; i < 8; ++i)
                tasks.push_back(hop_then(hopper, i));
            tasks.push_back(value(8));  // and one that finishes synchronously
            const auto values = sync_wait(when_all(std::move(tasks)));
            REQUIRE(values == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});
        }
    }
    SECTION("variadic, with a failure") {
        for (int round = 0; round < 200; ++round) {
            thread_hopper hopper;
            REQUIRE_THROWS_WITH(sync_wait(when_all(hop_then(hopper, 1), hop_then_fail(hopper, "boom"),
                                                   hop_then(hopper, 3))),
                                "boom");
        }
    }
}

TEST_CASE("when_all awaits lvalue awaitables in place", "[when_all]") {
    fake_completion first;
    fake_completion second;
    first.complete(1);
    second.complete(2);
    CHECK(sync_wait(when_all(first, second)) == std::tuple{1, 2});
}

TEST_CASE("100,000 when_alls of synchronous children in a row don't overflow the stack", "[when_all][stack]") {
    CHECK(sync_wait(count_synchronous_when_alls(100'000)) == 200'000);
}

// ---------------------------------------------------------------------------
// task_group

namespace {

task<> staged(fake_completion& source, int& stage) {
    stage = 1;
    co_await source;
    stage = 2;
}

task<> join(task_group& group) { co_await group.join(); }

task<> spawn_another(task_group& group, fake_completion& source) {
    group.spawn(wait_void(source));
    co_return;
}

}  // namespace

TEST_CASE("task_group::spawn runs the task at once, until it first suspends", "[task_group]") {
    fake_completion source;
    int stage = 0;
    task_group group;
    group.spawn(staged(source, stage));
    CHECK(stage == 1);
    source.complete(0);
    CHECK(stage == 2);
    sync_wait(group.join());
}

TEST_CASE("task_group::join resumes once every spawned task has finished", "[task_group]") {
    task_group group;
    outcome joined;

    SECTION("with nothing spawned it completes at once") { sync_wait(group.join()); }
    SECTION("tasks that finished synchronously") {
        bool ran[2] = {false, false};
        group.spawn(set_flag(ran[0]));
        group.spawn(set_flag(ran[1]));
        CHECK((ran[0] && ran[1]));
        sync_wait(group.join());
    }
    SECTION("tasks still suspended when the join starts") {
        fake_completion first;
        fake_completion second;
        group.spawn(wait_void(first));
        group.spawn(wait_void(second));
        start(join(group), joined);
        CHECK_FALSE(joined.done);
        first.complete(0);
        CHECK_FALSE(joined.done);
        second.complete(0);
        CHECK(joined.done);
        CHECK_FALSE(joined.error);
    }
    SECTION("tasks finished on other threads") {
        for (int round = 0; round < 100; ++round) {
            thread_hopper hopper;
            std::atomic<int> finished{0};
            for (int i = 0; i < 8; ++i)
                group.spawn([](thread_hopper& h, std::atomic<int>& count) -> task<> {
                    co_await h.hop();
                    ++count;
                }(hopper, finished));
            sync_wait(group.join());
            REQUIRE(finished == 8);
        }
    }
    SECTION("tasks spawned by other members are waited for too") {
        fake_completion source;
        group.spawn(spawn_another(group, source));
        start(join(group), joined);
        CHECK_FALSE(joined.done);
        source.complete(0);
        CHECK(joined.done);
    }
    SECTION("the group can be reused after a join") {
        fake_completion source;
        group.spawn(wait_void(source));
        source.complete(0);
        sync_wait(group.join());
        group.spawn(wait_void(source));
        start(join(group), joined);
        CHECK_FALSE(joined.done);
        source.complete(0);
        CHECK(joined.done);
    }
}

TEST_CASE("task_group::join rethrows the first exception a member threw", "[task_group]") {
    task_group group;
    outcome joined;

    SECTION("after every other member has finished") {
        fake_completion succeeds_later;
        fake_completion fails_later;
        bool ran = false;
        group.spawn(fail_void("first"));
        group.spawn(wait_void(succeeds_later));
        group.spawn(wait_then_fail_void(fails_later, "second"));
        group.spawn(set_flag(ran));
        start(join(group), joined);
        CHECK_FALSE(joined.done);
        fails_later.complete(0);
        CHECK_FALSE(joined.done);
        succeeds_later.complete(0);
        CHECK(joined.done);
        CHECK(ran);
        if (joined.error)
            CHECK(message_of(joined.error) == "first");
        else
            FAIL_CHECK("join did not rethrow");
    }
    SECTION("from a member that failed on another thread") {
        thread_hopper hopper;
        group.spawn(hop_then_fail(hopper, "remote"));
        CHECK_THROWS_WITH(sync_wait(group.join()), "remote");
    }
    SECTION("once: the next join succeeds") {
        group.spawn(fail_void("once"));
        CHECK_THROWS_WITH(sync_wait(group.join()), "once");
        sync_wait(group.join());
        group.spawn(fail_void("again"));
        CHECK_THROWS_WITH(sync_wait(group.join()), "again");
    }
}

TEST_CASE("a task_group has freed every member's frame by the time join resumes", "[task_group]") {
    counted::reset();
    fake_completion source;
    task_group group;
    group.spawn([](counted, fake_completion& s) -> task<> { co_await s; }(counted{1}, source));
    group.spawn([](counted) -> task<> { co_return; }(counted{2}));
    CHECK(counted::alive() == 1);
    std::thread completer{[&] { source.complete(0); }};
    sync_wait(group.join());
    completer.join();
    CHECK(counted::alive() == 0);
}

TEST_CASE("destroying a task_group before joining it terminates the program", "[task_group]") {
    SECTION("with a member still suspended") {
        const auto exit = run_in_child_process([] {
            fake_completion never;
            task_group group;
            group.spawn(wait_void(never));
        });
        CHECK(exit.aborted);
        CHECK_THAT(exit.stderr_text, Catch::Contains("cordma::task_group destroyed before co_await join()"));
    }
    SECTION("even when every member happened to finish") {
        const auto exit = run_in_child_process([] {
            bool ran = false;
            task_group group;
            group.spawn(set_flag(ran));
        });
        CHECK(exit.aborted);
        CHECK_THAT(exit.stderr_text, Catch::Contains("cordma::task_group"));
    }
    SECTION("but not once joined") {
        const auto exit = run_in_child_process([] {
            bool ran = false;
            task_group group;
            group.spawn(set_flag(ran));
            sync_wait(group.join());
        });
        CHECK_FALSE(exit.aborted);
        CHECK(exit.stderr_text.empty());
    }
}

// ---------------------------------------------------------------------------
// spawn_detached

TEST_CASE("spawn_detached runs the task at once and hands any exception to on_error", "[spawn_detached]") {
    std::exception_ptr reported;
    int reports = 0;
    auto on_error = [&](std::exception_ptr e) {
        ++reports;
        reported = e;
    };

    SECTION("a task that succeeds never calls on_error") {
        bool ran = false;
        spawn_detached(set_flag(ran), on_error);
        CHECK(ran);
        CHECK(reports == 0);
    }
    SECTION("a task that fails synchronously") {
        spawn_detached(fail_void("sync"), on_error);
        REQUIRE(reports == 1);
        CHECK(message_of(reported) == "sync");
    }
    SECTION("a task that fails later, on another thread, is reported on that thread") {
        fake_completion source;
        std::thread::id reported_on;
        spawn_detached(
            [](fake_completion& s) -> task<> {
                co_await s;
                throw std::runtime_error("later");
            }(source),
            [&](std::exception_ptr e) {
                reported = e;
                reported_on = std::this_thread::get_id();
            });
        CHECK_FALSE(reported);
        std::thread completer{[&] { source.complete(0); }};
        const auto completer_id = completer.get_id();
        completer.join();
        REQUIRE(reported);
        CHECK(message_of(reported) == "later");
        CHECK(reported_on == completer_id);
    }
    SECTION("an empty on_error is refused before the task runs") {
        bool ran = false;
        CHECK_THROWS_AS(spawn_detached(set_flag(ran), nullptr), std::invalid_argument);
        CHECK_FALSE(ran);
    }
    SECTION("the task's frame is freed when it finishes") {
        counted::reset();
        fake_completion source;
        spawn_detached([](counted, fake_completion& s) -> task<> { co_await s; }(counted{1}, source), on_error);
        CHECK(counted::alive() == 1);
        source.complete(0);
        CHECK(counted::alive() == 0);
    }
}

TEST_CASE("spawn_detached's default on_error prints what() and terminates", "[spawn_detached]") {
    const auto exit = run_in_child_process([] { spawn_detached(fail_void("nobody was listening")); });
    CHECK(exit.aborted);
    CHECK_THAT(exit.stderr_text, Catch::Contains("nobody was listening"));
    CHECK_THAT(exit.stderr_text, Catch::Contains("cordma::spawn_detached"));
}

TEST_CASE("an on_error that throws terminates the program", "[spawn_detached]") {
    const auto exit = run_in_child_process([] {
        spawn_detached(fail_void("original"), [](std::exception_ptr) { throw std::logic_error("handler broke"); });
    });
    CHECK(exit.aborted);
    CHECK_THAT(exit.stderr_text, Catch::Contains("handler broke"));
}

// ---------------------------------------------------------------------------
// Allocations. Counts are read into locals before any CHECK: Catch itself may
// allocate.

namespace {

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

}  // namespace

TEST_CASE("a task allocates its frame when created and nothing after that", "[task][allocation]") {
    SECTION("creating a task allocates one frame, destroying it frees it") {
        allocation_counter counter;
        cordma::testing::allocation_stats created;
        {
            auto t = answer();
            created = counter.this_thread();
        }
        const auto destroyed = counter.this_thread();
        CHECK_THAT(created.allocations, frame_count(1));
        CHECK(created.deallocations == 0);
        CHECK_THAT(destroyed.allocations, frame_count(1));
        CHECK(destroyed.deallocations == destroyed.allocations);
    }

    SECTION("awaiting created tasks and resuming them 1,000 times allocates nothing") {
        fake_completion source;
        int result = 0;

        allocation_counter creating;
        auto child = sum_of_completions(source, 1000);
        auto parent = plus_one(std::move(child));
        auto driver = store_in(std::move(parent), result);
        const auto created = creating.this_thread();

        allocation_counter starting;
        spawn_detached(std::move(driver));  // awaits parent, which awaits child
        const auto started = starting.this_thread();

        allocation_counter resuming;
        for (int i = 0; i < 1000; ++i)
            source.complete(1);
        const auto resumed = resuming.this_thread();

        CHECK_THAT(created.allocations, frame_count(3));  // one frame per task
        CHECK_THAT(started.allocations, frame_count(1));  // spawn_detached's own driver
        CHECK(resumed.allocations == 0);                  // 1,000 resumptions
        CHECK(resumed.deallocations == created.allocations + started.allocations);  // all freed
        CHECK(result == 1001);
    }

    SECTION("resuming from another thread allocates nothing either") {
        fake_completion source;
        int result = 0;
        std::atomic<bool> go{false};
        std::thread completer{[&] {
            go.wait(false);
            for (int i = 0; i < 1000; ++i) {
                while (!source.has_waiter())
                    std::this_thread::yield();
                source.complete(1);
            }
        }};
        spawn_detached(store_in(sum_of_completions(source, 1000), result));

        allocation_counter resuming;
        go = true;
        go.notify_one();
        completer.join();
        const auto resumed = resuming.all_threads();

        CHECK(resumed.allocations == 0);
        CHECK(result == 1000);
    }
}

TEST_CASE("when_all and task_group cost one driver frame per child, sync_wait one in all", "[allocation]") {
    SECTION("when_all of two tasks, through sync_wait") {
        auto first = value(1);
        auto second = value(2);
        allocation_counter counter;
        const auto results = sync_wait(when_all(std::move(first), std::move(second)));
        const auto spent = counter.this_thread();
        CHECK_THAT(spent.allocations, frame_count(3));        // sync_wait's driver, one per child
        CHECK(spent.deallocations == spent.allocations + 2);  // those, and both tasks
        CHECK(results == std::tuple{1, 2});
    }
    SECTION("task_group::spawn") {
        bool ran = false;
        auto member = set_flag(ran);
        task_group group;
        allocation_counter counter;
        group.spawn(std::move(member));
        const auto spent = counter.this_thread();
        CHECK_THAT(spent.allocations, frame_count(1));
        CHECK(spent.deallocations == spent.allocations + 1);  // the driver and the member, both finished
        CHECK(ran);
        sync_wait(group.join());
    }
}
