// Unit tests of cordma::when_all (<cordma/when_all.hpp>): results in argument
// order, every child started before any is waited for, the first failure
// rethrown once all finish, children on other threads, no stack growth,
// and what it allocates.
//
// Pure logic, no RDMA device needed; the helpers are in
// support/task_fixtures.hpp.

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include <catch2/catch.hpp>

#include "core/frame_cache_inspect.hpp"

#include "support/task_fixtures.hpp"

using namespace task_fixtures;
using cordma::sync_wait;
using cordma::testing::allocation_counter;

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
// Allocations. Counts are read into locals before any CHECK: Catch itself may
// allocate.

TEST_CASE("when_all costs one driver frame per child, sync_wait one in all", "[when_all][allocation]") {
    SECTION("when_all of two tasks, through sync_wait") {
        cordma::detail::frame_cache_trim();  // a known start: frames come from the thread's cache
        auto first = value(1);
        auto second = value(2);
        allocation_counter counter;
        const auto results = sync_wait(when_all(std::move(first), std::move(second)));
        const auto spent = counter.this_thread();
        CHECK_THAT(spent.allocations, frame_count(3));  // sync_wait's driver, one per child
        // Those, and both tasks: freed, or kept in the cache for the next frames.
        CHECK(spent.deallocations == (cordma::detail::frame_cache_enabled() ? 0 : spent.allocations + 2));
        CHECK(results == std::tuple{1, 2});
    }
}
