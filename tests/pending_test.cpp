// Unit tests for cordma::pending<T> and cordma::start: a task started now
// and awaited later (what a group's start_send and start_recv return). Pure
// logic, no RDMA device: completions are simulated by a trigger that resumes
// its waiter inline on whichever thread fires it, as the event listener
// does.

#include <atomic>
#include <coroutine>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <cordma/pending.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using cordma::pending;
using cordma::start;
using cordma::sync_wait;
using cordma::task;

namespace {

/// One coroutine waits on it; fire(v) resumes it inline with v (or lets a
/// later co_await go on at once).
class trigger {
public:
    struct awaiter {
        trigger& t;
        bool await_ready() const noexcept { return t.fired_.load(std::memory_order_acquire); }
        bool await_suspend(std::coroutine_handle<> h) noexcept {
            t.waiter_ = h;
            bool expected = false;
            // false: fired meanwhile, go on at once.
            return t.waiting_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
        }
        int await_resume() const noexcept { return t.value_; }
    };
    awaiter operator co_await() noexcept { return {*this}; }

    void fire(int value) {
        value_ = value;
        fired_.store(true, std::memory_order_release);
        if (waiting_.exchange(true, std::memory_order_acq_rel))
            waiter_.resume();
    }

private:
    std::atomic<bool> fired_{false};
    std::atomic<bool> waiting_{false};
    std::coroutine_handle<> waiter_;
    int value_ = 0;
};

task<int> twice_after(trigger& t, int* reached) {
    *reached = 1;
    int v = co_await t;
    *reached = 2;
    co_return 2 * v;
}

task<void> fail_after(trigger& t) {
    (void)co_await t;
    throw std::runtime_error("the task failed");
}

task<int> at_once(int v) { co_return v; }

}  // namespace

TEST_CASE("start runs a task at once, until it first suspends; wait returns its result", "[pending]") {
    trigger t;
    int reached = 0;
    pending<int> p = start(twice_after(t, &reached));
    CHECK(reached == 1);  // ran up to its co_await, inside start()
    CHECK_FALSE(p.done());
    t.fire(21);
    CHECK(reached == 2);
    CHECK(p.done());
    CHECK(sync_wait(p.wait()) == 42);
    CHECK_FALSE(p);  // waited: empty
}

TEST_CASE("wait on a task that finished already returns at once", "[pending]") {
    pending<int> p = start(at_once(7));
    CHECK(p.done());
    CHECK(sync_wait(p.wait()) == 7);
}

TEST_CASE("wait rethrows what the task threw", "[pending]") {
    trigger t;
    pending<void> p = start(fail_after(t));
    t.fire(0);
    CHECK_THROWS_WITH(sync_wait(p.wait()), "the task failed");
}

TEST_CASE("a task may finish on another thread while wait waits for it", "[pending]") {
    for (int round = 0; round < 200; ++round) {
        trigger t;
        int reached = 0;
        pending<int> p = start(twice_after(t, &reached));
        std::thread finisher([&t, round] { t.fire(round); });
        int got = sync_wait(p.wait());
        finisher.join();
        REQUIRE(got == 2 * round);
    }
}

TEST_CASE("a pending dropped before its task ends lets the task finish", "[pending]") {
    trigger t;
    int reached = 0;
    {
        pending<int> p = start(twice_after(t, &reached));
        CHECK(reached == 1);
    }
    t.fire(5);  // resumes the task, whose result goes nowhere
    CHECK(reached == 2);
}

TEST_CASE("waiting twice, or on an empty pending, is a logic_error", "[pending]") {
    pending<int> p = start(at_once(1));
    CHECK(sync_wait(p.wait()) == 1);
    CHECK_THROWS_AS(sync_wait(p.wait()), std::logic_error);
    pending<int> empty;
    CHECK_THROWS_AS(sync_wait(empty.wait()), std::logic_error);
}
