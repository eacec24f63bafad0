// Unit tests of cordma::sync_wait (<cordma/sync_wait.hpp>): it returns the
// awaitable's result, or rethrows its exception, once it completes on any
// thread.
//
// Pure logic, no RDMA device needed; the helpers are in
// support/task_fixtures.hpp.

#include <stdexcept>
#include <string>
#include <thread>

#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include <catch2/catch.hpp>

#include "support/task_fixtures.hpp"

using namespace task_fixtures;
using cordma::sync_wait;

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
