// Unit tests of cordma::task (<cordma/task.hpp>): laziness, results and
// exceptions handed to the awaiter, frames freed once, symmetric transfer
// (no stack growth), and what a task allocates.
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
#include <type_traits>
#include <utility>
#include <vector>

#include <cordma/detail/awaitable_traits.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

#include <catch2/catch.hpp>

#include "core/frame_cache_inspect.hpp"

#include "support/task_fixtures.hpp"

using namespace task_fixtures;
using cordma::sync_wait;
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
// Allocations. Counts are read into locals before any CHECK: Catch itself may
// allocate.

TEST_CASE("a task allocates its frame when created and nothing after that", "[task][allocation]") {
    // Frames come from the thread's frame cache (detail/frame_cache.hpp):
    // emptied first, so each count starts from a known state. Under the
    // sanitizers the cache is off and every frame is allocated and freed.
    const bool cached = cordma::detail::frame_cache_enabled();

    SECTION("creating a task allocates one frame; destroying it keeps it for the next") {
        cordma::detail::frame_cache_trim();
        allocation_counter counter;
        cordma::testing::allocation_stats created;
        {
            auto t = answer();
            created = counter.this_thread();
        }
        const auto destroyed = counter.this_thread();
        const std::size_t kept = cordma::detail::frame_cache_bytes();
        CHECK_THAT(created.allocations, frame_count(1));
        CHECK(created.deallocations == 0);
        CHECK_THAT(destroyed.allocations, frame_count(1));
        CHECK(destroyed.deallocations == (cached ? 0 : destroyed.allocations));
        CHECK((kept > 0) == (cached && destroyed.allocations == 1));
    }

    SECTION("the next frame of that size comes from the cache") {
        cordma::detail::frame_cache_trim();
        { auto first = answer(); }
        allocation_counter counter;
        for (int i = 0; i < 1000; ++i)
            (void)sync_wait(answer());
        const auto spent = counter.this_thread();
        if (cached) {
            CHECK(spent.allocations <= 1);  // sync_wait's driver, the first time (another size)
            CHECK(spent.deallocations == 0);
        } else {
            CHECK_THAT(spent.allocations, frame_count(2000));
        }
    }

    SECTION("awaiting created tasks and resuming them 1,000 times allocates nothing") {
        cordma::detail::frame_cache_trim();
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
        // All four ended: kept for the next frames, or freed without a cache.
        CHECK(resumed.deallocations == (cached ? 0 : created.allocations + started.allocations));
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

TEST_CASE("the frame cache is bounded per thread and freed when its thread ends", "[task][allocation]") {
    SECTION("ending 10,000 frames at once keeps at most frame_cache_max_bytes") {
        cordma::detail::frame_cache_trim();
        std::vector<task<int>> many;
        many.reserve(10'000);
        for (int i = 0; i < 10'000; ++i)
            many.push_back(answer());
        allocation_counter counter;
        many.clear();
        const auto ended = counter.this_thread();
        const std::size_t kept = cordma::detail::frame_cache_bytes();
        CHECK(kept <= cordma::detail::frame_cache_max_bytes);
        if (cordma::detail::frame_cache_enabled()) {  // else nothing is kept
            CHECK(kept > 0);
            CHECK(ended.deallocations >= 10'000 - cordma::detail::frame_cache_max_bytes / 64);
            CHECK(ended.deallocations < 10'000);
        } else {
            CHECK(ended.deallocations == 10'000);
        }
    }

    SECTION("a thread's cached frames are freed when it ends") {
        allocation_counter counter;
        std::thread worker([] {
            for (int i = 0; i < 100; ++i)
                (void)sync_wait(plus_one(answer()));
        });
        worker.join();
        const auto spent = counter.all_threads();
        CHECK(spent.allocations > 0);
        CHECK(spent.deallocations == spent.allocations);
    }
}
