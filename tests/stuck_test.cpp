// The stuck report (issue 34, stuck_report.hpp): a peer stopped with
// SIGSTOP while 120 operations wait on it is named, with every operation,
// its stage and its age, within a second of being asked; the endpoint's
// /stuck page and CORDMA_DUMP_ON's log line say the same (tests/meson.build
// sets CORDMA_DUMP_ON=SIGUSR2 for this test); an event listener whose
// thread is blocked is named busy instead of waited for. The modules'
// waits are named too, and an rpc call's trace id (trace.hpp) shows on
// both ends, reaches the handler and opens a span on each.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/agent_call.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/error.hpp>
#include <cordma/group.hpp>
#include <cordma/listener.hpp>
#include <cordma/log.hpp>
#include <cordma/metrics_endpoint.hpp>
#include <cordma/rpc.hpp>
#include <cordma/stream.hpp>
#include <cordma/stuck_report.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>
#include <cordma/when_all.hpp>

#include "support/group_ranks.hpp"
#include "support/http_client.hpp"
#include "support/peer_process.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;
using test::any_port;
using test::peer_process;
using clock_type = std::chrono::steady_clock;

namespace {

task<bool> fails(connection c, local_mr buffer, bool receive) {
    try {
        if (receive)
            co_await c.recv(buffer.all());
        else
            co_await c.send(buffer.all());
        co_return false;
    } catch (const std::system_error&) {
        co_return true;
    }
}

// Trivially destructible: g++ 12 destroys a braced temporary awaiter twice
// in some coroutines.
struct sleep_for {
    event_listener* listener;
    std::chrono::milliseconds delay;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { listener->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

// Polls `done` every 10 ms for at most `limit`: whether it became true.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = 10s) {
    auto until = clock_type::now() + limit;
    while (!done()) {
        if (clock_type::now() > until)
            return false;
        std::this_thread::sleep_for(10ms);
    }
    return true;
}

/// A span hook that writes down what it hears ("open rpc_call 1 ...").
struct span_log {
    std::mutex lock;
    std::vector<std::string> events;
    std::uint64_t next = 1;

    static std::uint64_t open(void* self, const span_info& s) {
        if (s.kind != span_kind::rpc_call && s.kind != span_kind::rpc_handler)
            return 0;  // the barrier's (the rpc call's are what is checked)
        auto* log = static_cast<span_log*>(self);
        std::lock_guard g(log->lock);
        std::uint64_t handle = log->next++;
        log->events.push_back("open " + std::string(to_string(s.kind)) + " " + std::to_string(handle) + " " +
                              s.trace.to_string() + " method " + std::to_string(s.method) + " (" +
                              std::string(s.name) + ") " + std::to_string(s.bytes) + " B");
        return handle;
    }
    static void close(void* self, std::uint64_t handle, const span_info& s, const std::error_code& outcome) {
        if (handle == 0)
            return;
        auto* log = static_cast<span_log*>(self);
        std::lock_guard g(log->lock);
        log->events.push_back("close " + std::string(to_string(s.kind)) + " " + std::to_string(handle) + " " +
                              (outcome ? outcome.message() : "ok"));
    }
    std::vector<std::string> read() {
        std::lock_guard g(lock);
        return events;
    }
};

}  // namespace

TEST_CASE("a stopped peer's 120 waiting operations are named with their stages and ages", "[stuck][process]") {
    // rnr_retry 7: sends to a peer that posts no receive wait, retried,
    // until the connection ends (not failed after 6 tries).
    builder b;
    b.send_queue_depth(64).rnr_retry(7);
    listener l = b.listen(any_port());
    peer_process peer({"sleep", l.address()});
    connection conn = sync_wait(l.accept());
    peer.stop();  // SIGSTOP: it posts no receive and sends nothing from now on
    auto pool = b.pool();

    std::vector<task<bool>> ops;
    for (int i = 0; i < 100; ++i)
        ops.push_back(fails(conn, pool->allocate(64), false));
    for (int i = 0; i < 20; ++i)
        ops.push_back(fails(conn, pool->allocate(128), true));
    auto started = clock_type::now();
    std::vector<bool> failed;
    std::thread waiting([&] { failed = sync_wait(when_all(std::move(ops))); });

    // All 120 seen, the oldest at least 300 ms old.
    REQUIRE(eventually([&] { return b.stuck().pending == 120; }));
    REQUIRE(eventually([&] {
        stuck_report r = b.stuck(1);
        return !r.oldest.empty() && r.oldest[0].age >= 300ms;
    }));
    auto asked = clock_type::now();
    stuck_report r = b.stuck(200);
    auto answered_in = clock_type::now() - asked;
    auto waited = clock_type::now() - started;
    CHECK(answered_in < 1s);
    CHECK(r.unanswered.empty());
    REQUIRE(r.pending == 120);
    REQUIRE(r.oldest.size() == 120);
    std::map<pending_stage, int> stages;
    std::map<operation_kind, int> kinds;
    for (const pending_operation& p : r.oldest) {
        ++stages[p.stage];
        ++kinds[p.kind];
        CHECK(p.peer == conn.peer());
        CHECK(p.qp_num == conn.qp()->qp_num());
        CHECK(p.role == "data");
        CHECK(p.bytes == (p.kind == operation_kind::recv ? 128u : 64u));
        CHECK(p.age <= std::chrono::duration_cast<std::chrono::milliseconds>(waited) + 50ms);
    }
    CHECK(kinds[operation_kind::send] == 100);
    CHECK(kinds[operation_kind::recv] == 20);
    CHECK(stages[pending_stage::receive_posted] == 20);
    // 64 entries in the send queue (the device may give more): the rest wait.
    CHECK(stages[pending_stage::posted] >= 64);
    CHECK(stages[pending_stage::posted] + stages[pending_stage::send_queue_full] == 100);
    CHECK(r.oldest.front().age >= 300ms);
    CHECK(r.oldest.front().age >= r.oldest.back().age);  // oldest first
    std::string text = to_text(r);
    INFO(text);
    CHECK_THAT(text, Catch::Contains("cordma: 120 operations pending; the oldest 120:"));
    CHECK_THAT(text, Catch::Contains(" ms  send 64 B, to " + conn.peer() + " (qp " +
                                     std::to_string(conn.qp()->qp_num()) + ", data): posted, waiting for its completion"));
    CHECK_THAT(text, Catch::Contains("recv 128 B, from " + conn.peer()));
    CHECK_THAT(text, Catch::Contains("posted, waiting for the peer's message"));
    if (stages[pending_stage::send_queue_full] > 0)
        CHECK_THAT(text, Catch::Contains("waiting for a send-queue entry"));

    std::printf("%s", to_text(b.stuck(3)).c_str());  // a real capture (docs/observability.md)

    // The process's report, the endpoint's page and the signal's log line.
    CHECK(process_stuck(5).pending >= 120);
    std::string name = "cordma-stuck-test-" + std::to_string(getpid());
    metrics_endpoint endpoint("unix:@" + name);
    CHECK_THAT(test::http_get_ok("unix:@" + name, "/stuck?limit=3"), Catch::Contains("120 operations pending; the oldest 3:"));
    std::mutex mutex;
    std::string logged;
    set_log_sink([&](log_level, std::string_view line) {
        std::lock_guard lock(mutex);
        logged += line;
    });
    REQUIRE(raise(SIGUSR2) == 0);  // CORDMA_DUMP_ON=SIGUSR2 (tests/meson.build)
    bool dumped = eventually([&] {
        std::lock_guard lock(mutex);
        return logged.find("120 operations pending") != std::string::npos;
    });
    set_log_sink(nullptr);
    CHECK(dumped);
    CHECK_THAT(logged, Catch::Contains("cordma: stuck report (CORDMA_DUMP_ON)"));

    // The peer killed: every operation fails, nothing is pending.
    REQUIRE(kill(peer.pid, SIGKILL) == 0);
    waiting.join();
    CHECK(std::count(failed.begin(), failed.end(), true) == 120);
    CHECK(eventually([&] { return b.stuck().pending == 0; }));
    CHECK(to_text(b.stuck()) == "cordma: no operation pending\n");
}

TEST_CASE("an agent's calls are named while they wait: for the stopped peer's answer, for a grant", "[stuck][agent]") {
    builder b;
    listener l = b.listen(any_port());
    peer_process peer({"sleep", l.address()});
    connection conn = sync_wait(l.accept());
    // One call answered first: the agent's queue pair is up (it connects
    // in the background after accept) and the peer's agent serves.
    CHECK(sync_wait(conn.request_remote_mr(64)).size() == 64);
    peer.stop();  // SIGSTOP: its agent answers nothing from now on
    std::stop_source stop;
    std::atomic<int> cancelled{0};
    auto call = [&] {
        agent_call c;
        c.stop = stop.get_token();
        return c;
    };
    std::thread asking([&] {
        try {
            sync_wait(conn.request_remote_mr(4096, 64, {}, access_flags::remote_write, call()));
        } catch (const operation_cancelled&) {
            ++cancelled;
        }
    });
    std::thread receiving([&] {
        try {
            sync_wait(conn.receive_remote_mr(call()));
        } catch (const operation_cancelled&) {
            ++cancelled;
        }
    });
    struct joined {
        std::stop_source& stop;
        std::thread& a;
        std::thread& b;
        ~joined() {
            stop.request_stop();
            a.join();
            b.join();
        }
    } joining{stop, asking, receiving};

    auto agent_calls = [&](const stuck_report& r) {
        std::vector<pending_operation> found;
        for (const pending_operation& p : r.oldest)
            if (p.stage == pending_stage::agent_call && p.age >= 200ms)
                found.push_back(p);
        return found;
    };
    stuck_report r;
    REQUIRE(eventually([&] {
        r = b.stuck(50);
        return agent_calls(r).size() == 2;
    }));
    std::string text = to_text(r);
    INFO(text);
    // The calls, and nothing else: the agent's standing receives are no
    // one's wait (its calls are).
    CHECK(r.pending == 2);
    for (const pending_operation& p : agent_calls(r)) {
        CHECK(p.peer == conn.peer());
        CHECK(p.role == "agent");
        CHECK(p.qp_num != 0);
        CHECK(p.qp_num != conn.qp()->qp_num());  // the agent's own (control) queue pair
    }
    CHECK_THAT(text, Catch::Contains("request_remote_mr of 4,096 B, to " + conn.peer() + " (qp "));
    CHECK_THAT(text, Catch::Contains(", agent): waiting for the peer's answer"));
    CHECK_THAT(text, Catch::Contains("receive_remote_mr, to " + conn.peer() + " (qp "));
    CHECK_THAT(text, Catch::Contains(", agent): waiting for the peer to grant a region (send_local_mr)"));
    std::printf("%s", to_text(r).c_str());  // a real capture (docs/observability.md)

    // Stopped: both end, and leave the report.
    stop.request_stop();
    asking.join();
    receiving.join();
    asking = std::thread([] {});
    receiving = std::thread([] {});
    CHECK(cancelled == 2);
    CHECK(eventually([&] { return agent_calls(b.stuck(50)).empty(); }));
    REQUIRE(kill(peer.pid, SIGKILL) == 0);
}

TEST_CASE("the modules' waits are named: an rpc call (both ends, traced), a stream read, a collective",
          "[stuck][trace]") {
    builder sb = test::test_builder();
    builder b = test::test_builder();
    sb.connect_timeout(30s);
    b.connect_timeout(30s);
    const trace_id traced = *trace_id::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    span_log spans;
    set_span_hook({&span_log::open, &span_log::close, &spans});
    struct unhook {
        ~unhook() { set_span_hook({}); }
    } unhooking;
    // An rpc server whose method 1 answers once told to.
    rpc::server server(sb);
    std::atomic<bool> answer{false};
    std::atomic<int> handler_saw_trace{0};
    auto* el = sb.event_listener().get();
    server.handle(1, "held", [&answer, &handler_saw_trace, traced, el](rpc::request r) -> task<std::vector<std::byte>> {
        if (r.trace() == traced)
            ++handler_saw_trace;
        while (!answer.load())
            co_await sleep_for{el, 20ms};
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    listener l = sb.listen(any_port());
    std::stop_source stop_serving;
    std::thread serving([&] { sync_wait(server.serve(l, stop_serving.get_token())); });
    struct serving_ends {  // on every way out: no thread left joinable
        std::stop_source& stop;
        std::thread& thread;
        ~serving_ends() {
            stop.request_stop();
            thread.join();
        }
    } serving_guard{stop_serving, serving};

    rpc::client client = sync_wait(rpc::client::connect(b, l.address()));
    // A stream (its hello is answered by accept: the two run together).
    stream_listener streams = stream::serve(b, any_port());
    auto [writer, reader] = sync_wait(when_all(stream::connect(b, streams.address()), streams.accept()));
    auto hosts = test::host_list(2);
    auto failures = std::make_shared<std::vector<std::string>>();

    // The waiters, released and joined on every way out, before anything
    // they use goes.
    std::stop_source stop_reading;
    std::atomic<bool> rank1_go{false};
    std::vector<std::thread> threads;
    struct release_all {
        std::atomic<bool>& answer;
        std::stop_source& stop_reading;
        std::atomic<bool>& rank1_go;
        std::vector<std::thread>& threads;
        ~release_all() {
            answer = true;
            stop_reading.request_stop();
            rank1_go = true;
            for (std::thread& t : threads)
                if (t.joinable())
                    t.join();
        }
    } releasing{answer, stop_reading, rank1_go, threads};
    // An rpc call the server holds, traced.
    threads.emplace_back([&] {
        rpc::call_options o;
        o.trace = traced;
        sync_wait(client.call(1, std::vector<std::byte>(100), o));
    });
    // A stream read with nothing written.
    threads.emplace_back([&] {
        std::vector<std::byte> buffer(4096);
        try {
            sync_wait(reader.read(buffer, stop_reading.get_token()));
        } catch (const std::exception&) {
        }  // stopped below, once seen
    });
    // Rank 0 of two in a barrier rank 1 has not called yet.
    threads.emplace_back([&, failures] {
        *failures = test::run_ranks(2, [&](int r) {
            builder rb = test::rank_builder();
            group_options o = group_options::from_hosts(hosts, r);
            o.formation_timeout = 30s;
            o.operation_timeout = 30s;
            group g = sync_wait(group::form(rb, o));
            if (r == 1)
                while (!rank1_go.load())
                    std::this_thread::sleep_for(10ms);
            group_call call;
            call.trace = traced;  // shows beside the barrier in rank 0's entry
            sync_wait(g.barrier(call));
            sync_wait(g.close());
        });
    });

    // Each named, aged, with its stage, in the process's report.
    auto has = [](const stuck_report& r, pending_stage stage, const std::string& what) {
        for (const pending_operation& p : r.oldest)
            if (p.stage == stage && p.what.find(what) != std::string::npos && p.age >= 200ms)
                return true;
        return false;
    };
    stuck_report r;
    bool all_seen = eventually([&] {
        r = process_stuck(100);
        return has(r, pending_stage::rpc_call, "rpc call #") && has(r, pending_stage::stream_read, "stream read") &&
               has(r, pending_stage::collective, "barrier #") &&
               has(r, pending_stage::rpc_handler, "(held), in its handler");
    }, 20s);
    std::string text = to_text(r);
    INFO(text);
    CHECK(all_seen);
    CHECK_THAT(text, Catch::Contains(" to method 1, 100 B, to "));
    CHECK_THAT(text, Catch::Contains(": waiting for its answer"));
    CHECK_THAT(text, Catch::Contains("stream read, 4,096 B, from "));
    CHECK_THAT(text, Catch::Contains(": waiting for the peer's data"));
    CHECK_THAT(text, Catch::Contains(" on rank 0 of 2, to the group's other rank: waiting for the other ranks"));
    // The traced call on both ends: the client's wait and the server's
    // handler, each with the trace id.
    CHECK_THAT(text, Catch::Contains(" to method 1, 100 B, to " + client.connection().peer() +
                                     ": waiting for its answer, trace 4bf92f3577b34da6a3ce929d0e0e4736"));
    CHECK_THAT(text, Catch::Contains(" to method 1 (held), in its handler, 100 B, from "));
    CHECK_THAT(text, Catch::Contains(": being served, trace 4bf92f3577b34da6a3ce929d0e0e4736"));
    int traced_ops = 0;
    for (const pending_operation& p : r.oldest)
        traced_ops += p.trace == traced ? 1 : 0;
    CHECK(traced_ops == 3);  // the call on both ends, and the barrier
    CHECK_THAT(text, Catch::Contains(": waiting for the other ranks, trace 4bf92f3577b34da6a3ce929d0e0e4736"));
    CHECK(handler_saw_trace == 1);
    stuck_report modules;  // the three, for a capture (docs/observability.md)
    for (const pending_operation& p : r.oldest)
        if (!p.what.empty())
            modules.oldest.push_back(p);
    modules.pending = modules.oldest.size();
    std::printf("%s", to_text(modules).c_str());

    // Once each is answered, none is left.
    answer = true;
    stop_reading.request_stop();
    rank1_go = true;
    for (std::thread& t : threads)
        t.join();
    test::require_none(*failures);
    CHECK(eventually([&] {
        stuck_report after = process_stuck(100);
        for (const pending_operation& p : after.oldest)
            if (!p.what.empty())
                return false;
        return true;
    }));

    // Its spans: opened on each end, closed on each once answered (the
    // server's when its answer's send completed, which may follow the
    // client's answer by a moment).
    std::string open_call = "open rpc_call 1 4bf92f3577b34da6a3ce929d0e0e4736 method 1 (method 1) 100 B";
    std::string open_handler = "open rpc_handler 2 4bf92f3577b34da6a3ce929d0e0e4736 method 1 (held) 100 B";
    CHECK(eventually([&] { return spans.read().size() == 4; }));
    auto events = spans.read();
    INFO(Catch::Detail::stringify(events));
    REQUIRE(events.size() == 4);
    CHECK(events[0] == open_call);
    CHECK(events[1] == open_handler);
    CHECK(std::count(events.begin(), events.end(), "close rpc_call 1 ok") == 1);
    CHECK(std::count(events.begin(), events.end(), "close rpc_handler 2 ok") == 1);

    // An untraced call opens none; a traced one that fails closes both
    // with its error, and its error names the trace.
    sync_wait(client.call(1, std::vector<std::byte>(8)));
    rpc::call_options o;
    o.trace = traced;
    std::string failed;
    try {
        sync_wait(client.call(9, std::vector<std::byte>(8), o));
    } catch (const rpc::rpc_error& e) {
        failed = e.what();
    }
    CHECK_THAT(failed, Catch::Contains("of method 9 to " + client.connection().peer() +
                                       " (trace 4bf92f3577b34da6a3ce929d0e0e4736): no method 9"));
    CHECK(eventually([&] { return spans.read().size() == 8; }));
    events = spans.read();
    INFO(Catch::Detail::stringify(events));
    REQUIRE(events.size() == 8);
    std::string unknown = make_error_code(rpc::rpc_errc::unknown_method).message();
    CHECK(std::count(events.begin(), events.end(), "close rpc_call 3 " + unknown) == 1);
    CHECK(std::count(events.begin(), events.end(), "close rpc_handler 4 " + unknown) == 1);
    CHECK(std::count(events.begin(), events.end(),
                     "open rpc_handler 4 4bf92f3577b34da6a3ce929d0e0e4736 method 9 () 8 B") == 1);

    sync_wait(when_all(writer.close(), reader.close()));
    sync_wait(client.close());
}

TEST_CASE("an event listener whose thread is blocked is named busy, not waited for", "[stuck]") {
    builder b;
    listener l = b.listen(any_port());  // makes the event listener
    std::atomic<bool> entered{false}, release{false};
    b.event_listener()->post([&] {
        entered = true;
        while (!release.load())
            std::this_thread::yield();  // a handler that blocks its thread
    });
    REQUIRE(eventually([&] { return entered.load(); }));
    auto asked = clock_type::now();
    stuck_report r = b.stuck(20, 200ms);
    auto took = clock_type::now() - asked;
    release = true;
    CHECK(took < 2s);
    REQUIRE(r.unanswered.size() == 1);
    CHECK_THAT(r.unanswered[0], Catch::Contains("the event listener on " + b.event_listener()->device()->name()));
    CHECK_THAT(to_text(r), Catch::Contains("did not answer in time: its thread is busy"));
    // Free again: it answers.
    CHECK(eventually([&] { return b.stuck(20, 200ms).unanswered.empty(); }));
}
