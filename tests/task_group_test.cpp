// Unit tests of <cordma/task_group.hpp>: task_group (spawn runs at once,
// join waits for every member and rethrows the first failure, frames freed,
// destroyed unjoined terminates) and spawn_detached (runs at once, hands
// exceptions to on_error, terminates by default), and what spawn allocates.
//
// Pure logic, no RDMA device needed; the helpers are in
// support/task_fixtures.hpp.

#define CORDMA_DEFINE_ALLOCATION_COUNTER
#include "support/allocation_counter.hpp"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

#include <catch2/catch.hpp>

#include "core/frame_cache_inspect.hpp"

#include "support/task_fixtures.hpp"

using namespace task_fixtures;
using cordma::sync_wait;
using cordma::task_group;
using cordma::testing::allocation_counter;

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

TEST_CASE("task_group::spawn costs one driver frame per member", "[task_group][allocation]") {
    SECTION("task_group::spawn") {
        cordma::detail::frame_cache_trim();  // a known start: frames come from the thread's cache
        bool ran = false;
        auto member = set_flag(ran);
        task_group group;
        allocation_counter counter;
        group.spawn(std::move(member));
        const auto spent = counter.this_thread();
        CHECK_THAT(spent.allocations, frame_count(1));
        // The driver and the member, both finished: freed, or kept in the cache.
        CHECK(spent.deallocations == (cordma::detail::frame_cache_enabled() ? 0 : spent.allocations + 1));
        CHECK(ran);
        sync_wait(group.join());
    }
}
