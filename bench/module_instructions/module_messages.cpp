// cordma_module_messages: one message of each module, repeated, for
// bench/module_instructions/run, which runs it under callgrind with two
// message counts and reports the difference per message (issue 33 item 1:
// "see it first, deterministically").
//
// Usage: cordma_module_messages --test T -n N [--warmup W] [--addr IP]
//                               [-d DEVICE] [--port P] [--timeout S]
//   send     the engine: an 8 B SEND ping-pong between two connections,
//            each side's receives kept posted by a receive_queue
//   rpc      cordma::rpc: a 64 B call to an echo handler (inline on the
//            server's event listener, the default), both sides
//   rpc_into the same through call_into and handle_into: the response
//            written in place on both sides, nothing allocated per call
//   stream   cordma::stream: a 64 B write answered by the peer's 64 B
//            write, each read with read_exactly, both sides
//   barrier  cordma::group of 2: a barrier, both ranks
//   bcast    cordma::group of 2: an 8 B broadcast from rank 0, both ranks
//   c        the C API (cordma.h): cordma_send and cordma_recv of 64 B,
//            answered the same way, both contexts
// Each test runs W + N round trips after setting up, then tears down. Both
// ends live in this one process, on one builder and so one event listener
// thread, over the device's loopback: a message's figure is what both
// sides spend on it (a request and its answer: one round trip). The setup
// and teardown are the same for any N, and cancel out in the difference of
// two runs. One thread, busy polling (the default here, --polling): under
// valgrind, which runs one thread at a time, a wait in io_uring never
// returns, and two spinning listeners would count each other's spins; on
// rxe's loopback a post completes within its doorbell, so each pass of the
// one busy listener finds work. The C API test (c) has a listener thread
// per context and the callers' threads besides. Its contexts use yielding
// polling: each calling thread drives its own context's loop while it
// waits (no thread switch per call, as in busy polling), and an empty turn
// yields, which lets valgrind run the other end; its counts still include
// the empty turns a wait takes (bench/module_instructions/run leaves it
// out by default).
//
// Every message is checked (its bytes carry the round trip's number), so
// a wrong or lost message fails the run (exit 1). The modules' default
// options. Every wait is bounded: a watchdog
// ends the process with status 3 after --timeout seconds (default 1200;
// callgrind runs the program about 50x slower).

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/cordma.h>
#include <cordma/group.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/rpc.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "../lib/bench_options.hpp"

#ifdef CORDMA_HAVE_CALLGRIND
#include <valgrind/callgrind.h>
#endif

using namespace cordma;
using cordma_bench::usage_error;

namespace {

struct config {
    std::string test;
    long n = 0;
    long warmup = 100;
    std::string addr;
    std::string device;
    long port = 7790;
    long timeout_s = 1200;
    polling_mode polling = polling_mode::busy;
    endpoint_exchange exchange = endpoint_exchange::tcp;
};

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: cordma_module_messages --test send|rpc|rpc_into|stream|barrier|bcast|c -n N [--warmup W]\n"
                 "                              [--addr IP] [-d DEVICE] [--port P] [--polling M] [--exchange tcp|cm]\n"
                 "                              [--timeout S]\n"
                 "  --addr defaults to $RXE_VM_ADDR, then $CORDMA_TEST_ADDR; --port is the first of the\n"
                 "  two the group test listens on (default 7790)\n");
}

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "cordma_module_messages: %s\n", why.c_str());
    std::exit(1);
}

builder make_builder(const config& cfg) {
    builder b;
    if (!cfg.device.empty())
        b.device(cfg.device);
    b.polling(cfg.polling);
    b.exchange(cfg.exchange);
    // Under valgrind every step runs tens of times slower: the default
    // 10 s for a handshake ran out ("timed out ... telling the peer we
    // are ready"). The run's own --timeout bounds it instead.
    b.connect_timeout(std::chrono::seconds(cfg.timeout_s));
    return b;
}

/// The measured window: round trips [warmup, warmup + n). The asking side
/// (the one that checks the answers) calls window(i) before round trip i
/// and window(count) after its last; callgrind, started with
/// --instr-atstart=no, counts only what runs in between, on every thread
/// (the answering side's work included). Set-up, warm-up and teardown run
/// uninstrumented, several times faster than under instrumentation: the
/// handshakes under full instrumentation took minutes.
long window_first = 0;
long window_last = 0;

void window(long i) {
#ifdef CORDMA_HAVE_CALLGRIND
    if (i == window_first)
        CALLGRIND_START_INSTRUMENTATION;
    else if (i == window_last)
        CALLGRIND_STOP_INSTRUMENTATION;
#else
    (void)i;
#endif
}

/// Round trip `i`'s bytes: a fixed pattern, with its number at the start
/// and at the end (so no round trip's bytes pass for another's). Copied,
/// not computed byte by byte: the loop cost about 600 instructions per
/// 64 B round trip (both ends' fills), the harness's, not cordma's, where
/// the engine's send harness writes 8 bytes; like with like.
void fill(std::byte* p, std::size_t size, std::uint64_t i) {
    static const std::array<std::byte, 4096> pattern = [] {
        std::array<std::byte, 4096> a{};
        for (std::size_t k = 0; k < a.size(); ++k)
            a[k] = static_cast<std::byte>((k * 131 + 7) & 0xff);
        return a;
    }();
    std::size_t n = std::min(size, pattern.size());
    std::memcpy(p, pattern.data(), n);
    if (size >= 2 * sizeof i) {
        std::memcpy(p, &i, sizeof i);
        std::memcpy(p + size - sizeof i, &i, sizeof i);
    }
}

// ---- send: the engine ------------------------------------------------------

task<void> send_answerer(connection c, local_mr out, long count, std::atomic<bool>* ready) {
    receive_queue rq(c, 16, 64);
    ready->store(true);
    ready->notify_all();  // the asker sends once this side's receives are posted
    for (long i = 0; i < count; ++i) {
        received_message m = co_await rq.next();
        std::memcpy(out.data(), m.bytes().data(), 8);
        m.release();
        co_await c.send(out.slice(0, 8));
    }
}

task<void> send_asker(connection c, local_mr out, long count) {
    receive_queue rq(c, 16, 64);
    for (long i = 0; i < count; ++i) {
        window(i);
        std::uint64_t k = static_cast<std::uint64_t>(i);
        std::memcpy(out.data(), &k, sizeof k);
        co_await c.send(out.slice(0, 8));
        received_message m = co_await rq.next();
        std::uint64_t back = 0;
        std::memcpy(&back, m.bytes().data(), sizeof back);
        if (m.bytes().size() != 8 || back != k)
            fail("send: round trip " + std::to_string(i) + " came back wrong");
    }
    window(count);
}

void run_send(const config& cfg, long count) {
    builder sb = make_builder(cfg), cb = sb;  // one runtime: one listener thread
    listener l = sb.listen(cfg.addr + ":0");
    std::atomic<bool> ready{false};
    std::thread server([&] {
        connection c = sync_wait(l.accept());
        sync_wait(send_answerer(c, sb.pool()->allocate(64), count, &ready));
        sync_wait(c.close());
    });
    connection c = sync_wait(cb.connect(l.address()));
    ready.wait(false);  // bounded by the watchdog
    sync_wait(send_asker(c, cb.pool()->allocate(64), count));
    server.join();
    sync_wait(c.close());
}

// ---- rpc --------------------------------------------------------------------

task<void> rpc_caller(rpc::client& c, long count) {
    std::vector<std::byte> request(64);
    for (long i = 0; i < count; ++i) {
        window(i);
        fill(request.data(), request.size(), static_cast<std::uint64_t>(i));
        std::vector<std::byte> response = co_await c.call(1, request);
        if (response != request)
            fail("rpc: call " + std::to_string(i) + " came back wrong");
    }
    window(count);
}

task<void> rpc_caller_into(rpc::client& c, long count) {
    std::vector<std::byte> request(64), response(64);
    for (long i = 0; i < count; ++i) {
        window(i);
        fill(request.data(), request.size(), static_cast<std::uint64_t>(i));
        std::size_t n = co_await c.call_into(2, request, response);
        if (n != request.size() || response != request)
            fail("rpc_into: call " + std::to_string(i) + " came back wrong");
    }
    window(count);
}

void run_rpc(const config& cfg, long count, bool in_place) {
    builder sb = make_builder(cfg), cb = sb;  // one runtime: one listener thread
    rpc::server server(sb);
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    server.handle_into(2, "echo in place", [](rpc::request r, std::span<std::byte> reply) -> task<std::size_t> {
        if (r.bytes().size() > reply.size())
            throw std::length_error("echo in place: the request does not fit the reply");
        std::memcpy(reply.data(), r.bytes().data(), r.bytes().size());
        co_return r.bytes().size();
    });
    listener l = sb.listen(cfg.addr + ":0");
    std::stop_source stop;
    std::thread serving([&] { sync_wait(server.serve(l, stop.get_token())); });
    rpc::client c = sync_wait(rpc::client::connect(cb, l.address()));
    sync_wait(in_place ? rpc_caller_into(c, count) : rpc_caller(c, count));
    sync_wait(c.close());
    stop.request_stop();
    serving.join();
}

// ---- stream -----------------------------------------------------------------

task<void> stream_answerer(stream s, long count) {
    std::vector<std::byte> buf(64);
    for (long i = 0; i < count; ++i) {
        co_await s.read_exactly(buf);
        co_await s.write(buf);
    }
    co_await s.close();
}

task<void> stream_asker(stream s, long count) {
    std::vector<std::byte> out(64), in(64);
    for (long i = 0; i < count; ++i) {
        window(i);
        fill(out.data(), out.size(), static_cast<std::uint64_t>(i));
        co_await s.write(out);
        co_await s.read_exactly(in);
        if (in != out)
            fail("stream: round trip " + std::to_string(i) + " came back wrong");
    }
    window(count);
    co_await s.close();
}

void run_stream(const config& cfg, long count) {
    builder sb = make_builder(cfg), cb = sb;  // one runtime: one listener thread
    stream_listener l = stream::serve(sb, cfg.addr + ":0");
    std::thread server([&] { sync_wait(stream_answerer(sync_wait(l.accept()), count)); });
    sync_wait(stream_asker(sync_wait(stream::connect(cb, l.address())), count));
    server.join();
}

// ---- group of 2 ---------------------------------------------------------------

task<void> group_rounds(group& g, bool broadcast, long count) {
    local_mr buf = g.allocate(64);
    for (long i = 0; i < count; ++i) {
        if (g.rank() == 0)
            window(i);
        std::uint64_t k = static_cast<std::uint64_t>(i);
        if (!broadcast) {
            co_await g.barrier();
            continue;
        }
        if (g.rank() == 0)
            std::memcpy(buf.data(), &k, sizeof k);
        co_await g.broadcast(buf.slice(0, 8), 0);
        std::uint64_t got = 0;
        std::memcpy(&got, buf.data(), sizeof got);
        if (got != k)
            fail("bcast: round " + std::to_string(i) + " delivered " + std::to_string(got) + " to rank " +
                 std::to_string(g.rank()));
    }
    if (g.rank() == 0)
        window(count);
}

void run_group(const config& cfg, long count, bool broadcast) {
    std::vector<std::string> hosts = {cfg.addr + ":" + std::to_string(cfg.port),
                                      cfg.addr + ":" + std::to_string(cfg.port + 1)};
    builder b = make_builder(cfg);
    (void)b.pool();  // the runtime exists before the copies: both ranks share its listener thread
    builder b1 = b;
    // Under valgrind formation takes minutes: the run's --timeout bounds it
    // (the default 60 s ran out in a callgrind run).
    auto options = [&](int rank) {
        group_options o = group_options::from_hosts(hosts, rank);
        o.formation_timeout = std::chrono::seconds(cfg.timeout_s);
        o.operation_timeout = std::chrono::seconds(cfg.timeout_s);
        return o;
    };
    auto [g0, g1] = sync_wait(when_all(group::form(b, options(0)), group::form(b1, options(1))));
    sync_wait(when_all(group_rounds(g0, broadcast, count), group_rounds(g1, broadcast, count)));
    sync_wait(when_all(g0.close(), g1.close()));
}

// ---- the C API ------------------------------------------------------------------

[[noreturn]] void c_fail(const char* call) { fail(std::string("c: ") + call + ": " + cordma_last_error()); }

void run_c(const config& cfg, long count) {
    cordma_config server_config;
    cordma_config_init(&server_config);
    server_config.address = cfg.addr.c_str();
    server_config.port = 0;
    server_config.listen = true;
    server_config.polling = CORDMA_POLLING_YIELDING;  // see the top
    cordma_context* server = cordma_create(&server_config);
    if (server == nullptr)
        c_fail("cordma_create (listening)");
    std::thread answering([&] {
        int peer = cordma_accept(server);
        if (peer < 0)
            c_fail("cordma_accept");
        char buf[64];
        for (long i = 0; i < count; ++i) {
            ssize_t n = cordma_recv(server, peer, buf, sizeof buf);
            if (n != sizeof buf)
                c_fail("cordma_recv (answering)");
            if (cordma_send(server, peer, buf, sizeof buf) != 0)
                c_fail("cordma_send (answering)");
        }
    });
    cordma_config client_config;
    cordma_config_init(&client_config);
    client_config.address = cfg.addr.c_str();
    client_config.polling = CORDMA_POLLING_YIELDING;
    cordma_context* client = cordma_create(&client_config);
    if (client == nullptr)
        c_fail("cordma_create");
    int peer = cordma_connect(client, cfg.addr.c_str(), cordma_local_port(server));
    if (peer < 0)
        c_fail("cordma_connect");
    std::vector<std::byte> out(64), in(64);
    for (long i = 0; i < count; ++i) {
        window(i);
        fill(out.data(), out.size(), static_cast<std::uint64_t>(i));
        if (cordma_send(client, peer, out.data(), out.size()) != 0)
            c_fail("cordma_send");
        if (cordma_recv(client, peer, in.data(), in.size()) != static_cast<ssize_t>(in.size()))
            c_fail("cordma_recv");
        if (in != out)
            fail("c: round trip " + std::to_string(i) + " came back wrong");
    }
    window(count);
    answering.join();
    cordma_destroy(client);
    cordma_destroy(server);
}

config parse(int argc, char** argv) {
    config cfg;
    cordma_bench::option_reader r(argc, argv, usage);
    while (r.next()) {
        if (r.name() == "--test")
            cfg.test = r.value();
        else if (r.name() == "-n")
            cfg.n = cordma_bench::parse_number("-n", r.value(), 1, 100'000'000);
        else if (r.name() == "--warmup")
            cfg.warmup = cordma_bench::parse_number("--warmup", r.value(), 0, 1'000'000);
        else if (r.name() == "--addr")
            cfg.addr = r.value();
        else if (r.name() == "-d")
            cfg.device = r.value();
        else if (r.name() == "--port")
            cfg.port = cordma_bench::parse_number("--port", r.value(), 1, 65534);
        else if (r.name() == "--polling")
            cfg.polling = cordma_bench::parse_polling(r.value(), "busy, event, adaptive or yielding");
        else if (r.name() == "--exchange") {
            std::string_view v = r.value();
            if (v != "tcp" && v != "cm")
                throw usage_error("--exchange: tcp or cm, got '" + std::string(v) + "'");
            cfg.exchange = v == "tcp" ? endpoint_exchange::tcp : endpoint_exchange::rdma_cm;
        } else if (r.name() == "--timeout")
            cfg.timeout_s = cordma_bench::parse_number("--timeout", r.value(), 1, 86'400);
        else
            throw usage_error("unknown option '" + std::string(r.arg()) + "'");
    }
    if (cfg.test != "send" && cfg.test != "rpc" && cfg.test != "rpc_into" && cfg.test != "stream" && cfg.test != "barrier" &&
        cfg.test != "bcast" && cfg.test != "c")
        throw usage_error(cfg.test.empty() ? "--test is required" : "--test: no test '" + cfg.test + "'");
    if (cfg.n == 0)
        throw usage_error("-n is required");
    if (cfg.addr.empty()) {
        for (const char* var : {"RXE_VM_ADDR", "CORDMA_TEST_ADDR"})
            if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
                cfg.addr = v;
                break;
            }
        if (cfg.addr.empty())
            throw usage_error("no address: give --addr (an IP on the RDMA device's netdev)");
    }
    return cfg;
}

}  // namespace

int main(int argc, char** argv) {
    config cfg;
    try {
        cfg = parse(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "cordma_module_messages: %s\n", e.what());
        usage(stderr);
        return 2;
    }
    std::thread([limit = cfg.timeout_s] {
        std::this_thread::sleep_for(std::chrono::seconds(limit));
        std::fprintf(stderr, "cordma_module_messages: still running after --timeout %ld s; giving up\n", limit);
        std::_Exit(3);
    }).detach();
    long count = cfg.warmup + cfg.n;
    window_first = cfg.warmup;
    window_last = count;
    auto t0 = std::chrono::steady_clock::now();
    try {
        if (cfg.test == "send")
            run_send(cfg, count);
        else if (cfg.test == "rpc" || cfg.test == "rpc_into")
            run_rpc(cfg, count, cfg.test == "rpc_into");
        else if (cfg.test == "stream")
            run_stream(cfg, count);
        else if (cfg.test == "barrier" || cfg.test == "bcast")
            run_group(cfg, count, cfg.test == "bcast");
        else
            run_c(cfg, count);
    } catch (const std::exception& e) {
        fail(cfg.test + ": " + e.what());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"test\": \"%s\", \"n\": %ld, \"warmup\": %ld, \"round_trips\": %ld, \"seconds\": %.2f}\n",
                cfg.test.c_str(), cfg.n, cfg.warmup, count, s);
    return 0;
}
