// cordma_storm: a connection storm, N clients connecting at once to one
// server, timed; the program beside rdma-core's cmtime in bench/storm/run.
//
// Usage:
//   cordma_storm serve ADDR:PORT --connections N [--kind K] [--timeout S]
//   cordma_storm connect ADDR:PORT --connections N [--kind K] [--timeout S]
//   --kind plain  builder::agent(false): one QP per connection, connected
//                 over rdma_cm exactly as cmtime's (default)
//          agent  cordma's default connection: a data QP and the agent's
//                 control QP, the agent's hello exchanged
//          rpc    an rpc::client per connection, each making one call (a
//                 64-byte echo, checked) once connected
//   --depth D     send and receive queue depth of each connection (default:
//                 the builder's, 127 each), to see what a deep QP costs
//   --cq-size N   builder::cq_size(N): the shared CQs' first size
//   --sge N       builder::max_sge(N); --inline B  builder::max_inline_data(B)
//   --calls K     rpc: calls each client makes once connected (default 1)
//   --exchange E  cm (rdma_cm, default) or tcp (the TCP endpoint exchange)
//   --ack-timeout C  builder::timeout(C): the QPs' ACK timeout code (4.096 us
//                 x 2^C per try; default the builder's, 14)
//   --check-qps   fail unless every queue pair is sound: the client's all
//                 in RTS once connected (and called), and on both sides
//                 none of this process's left in the error state once every
//                 connection has closed (`rdma resource show qp`)
//   --no-rnr      fail if this host's device counted a receiver-not-ready
//                 NAK, sent or received, during the run (send_rnr_err,
//                 rcvd_rnr_err): no frame may find its receiver unready
//   --timeout S   bound on the whole run (default 120): a process that is
//                 still waiting then says so and exits 1
//
// The server listens with a backlog of at least N (so a storm is never
// refused, only served), prints "listening on IP:PORT", takes N clients
// (from any number of client processes and hosts) and exits once every
// one has closed; a plain server prints the CPU time it spent from
// listening to its last accept. The client starts N connects at
// once (coroutines on one event listener), waits for all (and, for rpc,
// their calls), then closes them all; it prints one JSON line: the
// storm's wall time, connections per second, the CPU time this process
// spent meanwhile (user and system, every thread), each connection's own time
// (p50, p99, max), the close time, and what the device counted meanwhile
// (its port's hw_counters: packets, RNR NAKs, retries, sequence errors;
// client and server on one device count together).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/device.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/listener.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

enum class kind { plain, agent, rpc };

struct options {
    bool serving = false;
    std::string address;
    long connections = 100;
    kind what = kind::plain;
    long timeout_s = 120;
    long depth = 0;  // 0: the builder's default
    long calls = 1;  // rpc: calls per client
    bool tcp = false;
    bool check_qps = false;
    bool no_rnr = false;
    long ack_timeout = 0;  // 0: the builder's default
    long cq_size = 0;      // 0: the builder's default
    long sge = 0;          // 0: the builder's default
    long inline_bytes = -1;  // -1: the builder's default
};

void usage(std::FILE* to) {
    std::fprintf(to,
                 "usage: cordma_storm serve|connect ADDR:PORT --connections N [--kind plain|agent|rpc] "
                 "[--depth D] [--cq-size N] [--sge N] [--inline B] [--calls K] [--exchange cm|tcp] [--ack-timeout C] [--check-qps] [--no-rnr] [--timeout S]\n");
}

builder builder_for(const options& o) {
    builder b;
    b.agent(o.what == kind::agent);
    b.connect_timeout(std::chrono::seconds(o.timeout_s));
    b.backlog(static_cast<std::size_t>(std::max(256L, o.connections)));
    if (o.tcp)
        b.exchange(endpoint_exchange::tcp);
    if (o.ack_timeout != 0)
        b.timeout(static_cast<std::uint8_t>(o.ack_timeout));
    if (o.depth != 0)
        b.send_queue_depth(static_cast<std::uint32_t>(o.depth)).recv_queue_depth(static_cast<std::uint32_t>(o.depth));
    if (o.cq_size != 0)
        b.cq_size(static_cast<int>(o.cq_size));
    if (o.sge != 0)
        b.max_sge(static_cast<std::uint32_t>(o.sge));
    if (o.inline_bytes >= 0)
        b.max_inline_data(static_cast<std::uint32_t>(o.inline_bytes));
    return b;
}

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

/// Exits the process with a message once `limit` has passed, unless
/// disarmed: every wait of the run is under it.
class watchdog {
public:
    watchdog(long limit_s, const char* who)
        : thread_([limit_s, who](std::stop_token done) {
              std::mutex m;
              std::condition_variable_any cv;
              std::unique_lock lock(m);
              if (!cv.wait_for(lock, done, std::chrono::seconds(limit_s), [] { return false; }) &&
                  !done.stop_requested()) {
                  std::fprintf(stderr, "cordma_storm %s: not done within %ld s; giving up\n", who, limit_s);
                  std::_Exit(1);
              }
          }) {}

private:
    std::jthread thread_;
};

// ---- queue pair checks ------------------------------------------------------

/// This process's queue pairs in the error state, as the kernel lists them
/// (`rdma resource show qp`), or -1 with a message if it cannot be asked.
long qps_in_error() {
    std::FILE* p = ::popen("rdma resource show qp 2>&1", "r");
    if (p == nullptr) {
        std::fprintf(stderr, "cordma_storm: cannot run `rdma resource show qp`\n");
        return -1;
    }
    std::string mine = " pid " + std::to_string(::getpid()) + " ";
    long errors = 0;
    char line[1024];
    while (std::fgets(line, sizeof line, p) != nullptr) {
        std::string l = line;
        if (l.find(mine) != std::string::npos && l.find(" state ERR ") != std::string::npos)
            ++errors;
    }
    return ::pclose(p) == 0 ? errors : -1;
}

/// The same once it has settled: a QP of a connection just closed may sit
/// in the error state until its last flushed completion is reaped, so this
/// asks again (every 100 ms, for up to 10 s) while any is.
long qps_left_in_error() {
    long errors = qps_in_error();
    for (int i = 0; i < 100 && errors > 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the kernel's list
        errors = qps_in_error();
    }
    return errors;
}

/// Whether `c`'s queue pair is ready to send (ibv_query_qp).
bool in_rts(const connection& c) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    return ibv_query_qp(c.qp()->native_handle(), &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_RTS;
}

/// This process's CPU time so far (every thread, user and kernel), in ms.
struct cpu_time {
    double user_ms = 0, sys_ms = 0;
    static cpu_time now() {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
        return {ms(u.ru_utime), ms(u.ru_stime)};
    }
    cpu_time operator-(const cpu_time& o) const { return {user_ms - o.user_ms, sys_ms - o.sys_ms}; }
};

// ---- serve -----------------------------------------------------------------

/// Holds one accepted connection until its client closes it.
task<void> hold(connection c, std::shared_ptr<memory_pool> pool) {
    local_mr buffer = pool->allocate(64);
    try {
        co_await c.recv(buffer.all());  // ends when the client disconnects
    } catch (const std::exception&) {
    }
    co_await c.close();
}

task<void> serve_plain(const options& o, builder b) {
    listener l = b.listen(o.address);
    std::printf("listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    auto pool = b.pool();
    task_group held;
    cpu_time before = cpu_time::now();
    for (long i = 0; i < o.connections; ++i)
        held.spawn(hold(co_await l.accept(), pool));
    cpu_time used = cpu_time::now() - before;
    std::printf("server CPU from listening to the last accept: user %.1f ms, system %.1f ms (%.3f ms a connection)\n",
                used.user_ms, used.sys_ms, (used.user_ms + used.sys_ms) / static_cast<double>(o.connections));
    std::fflush(stdout);
    co_await held.join();
}

/// The device's counters now (empty if it has none readable).
device_counters counters_of(builder& b) {
    const auto& device = *b.event_listener()->device();
    try {
        return read_device_counters(device, device.first_active_port());
    } catch (const std::exception&) {
        return {};
    }
}

/// --no-rnr: says what the device counted; false if any RNR NAK.
bool no_rnr_seen(const device_counters& seen) {
    if (!seen.hw_counters.contains("send_rnr_err") || !seen.hw_counters.contains("rcvd_rnr_err")) {
        std::fprintf(stderr, "cordma_storm: --no-rnr: device %s has no send_rnr_err and rcvd_rnr_err counters to "
                             "read\n", seen.device.c_str());
        return false;
    }
    unsigned long long sent = seen["send_rnr_err"], received = seen["rcvd_rnr_err"];
    std::printf("receiver-not-ready NAKs on this host: %llu sent, %llu received\n", sent, received);
    if (sent + received == 0)
        return true;
    std::fprintf(stderr, "cordma_storm: --no-rnr: this host's device counted %llu receiver-not-ready NAKs sent and "
                         "%llu received: a frame found no receive posted\n", sent, received);
    return false;
}

int serve_rpc(const options& o, builder b) {
    std::size_t n = static_cast<std::size_t>(o.connections);
    std::size_t total = n * static_cast<std::size_t>(o.calls);
    rpc::server server(b, {.receives = std::max<std::size_t>(512, 4 * n), .credits = 4});
    std::atomic<std::size_t> calls{0};
    std::stop_source stop;
    server.handle(1, "echo", [&](rpc::request r) -> task<std::vector<std::byte>> {
        std::vector<std::byte> out(r.bytes().begin(), r.bytes().end());
        if (++calls == total)
            stop.request_stop();  // every client has called: stop taking more
        co_return out;
    });
    listener l = b.listen(o.address);
    device_counters before = counters_of(b);
    std::printf("listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    sync_wait(server.serve(l, stop.get_token()));
    if (o.no_rnr) {
        device_counters seen = counters_of(b).since(before);
        if (!no_rnr_seen(seen))
            return 1;
    }
    if (!o.check_qps)
        return 0;
    // Every call is answered; the clients close once theirs are. Waiting for
    // that (the watchdog bounds it), then nothing may be left in error.
    while (server.clients() != 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the server's count
    long errors = qps_left_in_error();
    std::printf("queue pairs in the error state after every client closed: %ld\n", errors);
    return errors == 0 ? 0 : 1;
}

// ---- connect ---------------------------------------------------------------

struct storm {
    std::vector<double> ms;  // each connection's own time, in finishing order
    std::vector<double> connect_ms;  // rpc: the connect's part of it
    std::vector<double> first_call_ms;  // rpc: the first call's own time
    std::vector<connection> connections;
    std::vector<rpc::client> clients;
    std::string first_error;
    std::size_t failed = 0;
};

task<void> one_plain(builder b, const std::string& address, storm* s) {
    auto t0 = clock_type::now();
    try {
        connection c = co_await b.connect(address);
        s->ms.push_back(ms_since(t0));
        s->connections.push_back(std::move(c));
    } catch (const std::exception& e) {
        if (s->failed++ == 0)
            s->first_error = e.what();
    }
}

task<void> one_rpc(builder b, const std::string& address, long calls, storm* s) {
    auto t0 = clock_type::now();
    try {
        rpc::client c = co_await rpc::client::connect(b, address);
        s->connect_ms.push_back(ms_since(t0));
        for (long i = 0; i < calls; ++i) {
            std::vector<std::byte> request(64, static_cast<std::byte>(0x6b + i));
            auto tc = clock_type::now();
            std::vector<std::byte> response = co_await c.call(1, request);
            if (i == 0)
                s->first_call_ms.push_back(ms_since(tc));
            if (response != request)
                throw std::runtime_error("call " + std::to_string(i) + "'s echo came back different");
        }
        s->ms.push_back(ms_since(t0));
        s->clients.push_back(std::move(c));
    } catch (const std::exception& e) {
        if (s->failed++ == 0)
            s->first_error = e.what();
    }
}


task<int> connect_all(const options& o, builder b) {
    storm s;
    s.ms.reserve(static_cast<std::size_t>(o.connections));
    device_counters before = counters_of(b);
    co_await b.event_listener()->schedule();  // every connect starts on the event listener
    auto t0 = clock_type::now();
    cpu_time cpu0 = cpu_time::now();
    task_group storm_of;
    for (long i = 0; i < o.connections; ++i)
        storm_of.spawn(o.what == kind::rpc ? one_rpc(b, o.address, o.calls, &s) : one_plain(b, o.address, &s));
    co_await storm_of.join();
    double wall_ms = ms_since(t0);
    cpu_time cpu = cpu_time::now() - cpu0;
    std::size_t unready = 0;
    if (o.check_qps) {
        for (const auto& c : s.connections)
            unready += in_rts(c) ? 0 : 1;
        for (const auto& c : s.clients)
            unready += in_rts(c.connection()) ? 0 : 1;
    }

    auto t1 = clock_type::now();
    task_group closing;
    for (auto& c : s.connections)
        closing.spawn(c.close());
    for (auto& c : s.clients)
        closing.spawn(c.close());
    co_await closing.join();
    double close_ms = ms_since(t1);
    device_counters seen = counters_of(b).since(before);

    std::vector<double> sorted = s.ms;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) {
        return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(q * sorted.size()))];
    };
    const char* kinds[] = {"plain", "agent", "rpc"};
    if (!s.connect_ms.empty()) {
        std::sort(s.connect_ms.begin(), s.connect_ms.end());
        std::sort(s.first_call_ms.begin(), s.first_call_ms.end());
        std::printf("rpc connect alone: p50 %.2f ms, max %.2f ms; first call alone: min %.2f p50 %.2f max %.2f ms\n",
                    s.connect_ms[s.connect_ms.size() / 2], s.connect_ms.back(), s.first_call_ms.front(),
                    s.first_call_ms[s.first_call_ms.size() / 2], s.first_call_ms.back());
    }
    std::printf("{\"kind\": \"%s\", \"depth\": %ld, \"connections\": %ld, \"connected\": %zu, \"failed\": %zu, \"wall_ms\": %.2f, "
                "\"per_s\": %.1f, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f, \"close_ms\": %.2f, "
                "\"cpu_user_ms\": %.1f, \"cpu_sys_ms\": %.1f, "
                "\"device\": {\"sent_pkts\": %llu, \"send_rnr_err\": %llu, \"rcvd_rnr_err\": %llu, "
                "\"completer_retry_err\": %llu, \"retry_exceeded_err\": %llu, \"rcvd_seq_err\": %llu, "
                "\"duplicate_request\": %llu}}\n",
                kinds[static_cast<int>(o.what)], o.depth, o.connections, sorted.size(), s.failed, wall_ms,
                static_cast<double>(sorted.size()) / (wall_ms / 1000.0), at(0.5), at(0.99),
                sorted.empty() ? 0.0 : sorted.back(), close_ms, cpu.user_ms, cpu.sys_ms,
                static_cast<unsigned long long>(seen["sent_pkts"]), static_cast<unsigned long long>(seen["send_rnr_err"]),
                static_cast<unsigned long long>(seen["rcvd_rnr_err"]),
                static_cast<unsigned long long>(seen["completer_retry_err"]),
                static_cast<unsigned long long>(seen["retry_exceeded_err"]),
                static_cast<unsigned long long>(seen["rcvd_seq_err"]),
                static_cast<unsigned long long>(seen["duplicate_request"]));
    if (s.failed != 0)
        std::fprintf(stderr, "cordma_storm connect: %zu of %ld failed; the first: %s\n", s.failed, o.connections,
                     s.first_error.c_str());
    long errors = 0;
    if (o.check_qps) {
        s.connections.clear();  // closed: their handles go too
        s.clients.clear();
        errors = qps_left_in_error();
        std::printf("queue pairs not in RTS once connected: %zu; in the error state after closing: %ld\n", unready,
                    errors);
    }
    bool rnr = o.no_rnr && !no_rnr_seen(seen);
    co_return s.failed == 0 && unready == 0 && errors == 0 && !rnr ? 0 : 1;
}

options parse(int argc, char** argv) {
    options o;
    if (argc < 3)
        throw cordma_bench::usage_error("serve or connect, and ADDR:PORT, are missing");
    std::string_view mode = argv[1];
    if (mode != "serve" && mode != "connect")
        throw cordma_bench::usage_error("the first argument is serve or connect, not '" + std::string(mode) + "'");
    o.serving = mode == "serve";
    o.address = argv[2];
    cordma_bench::option_reader r(argc - 2, argv + 2, usage);
    while (r.next()) {
        if (r.name() == "--connections")
            o.connections = cordma_bench::parse_number("--connections", r.value(), 1, 65535);
        else if (r.name() == "--depth")
            o.depth = cordma_bench::parse_number("--depth", r.value(), 1, 16384);
        else if (r.name() == "--cq-size")
            o.cq_size = cordma_bench::parse_number("--cq-size", r.value(), 1, 1 << 22);
        else if (r.name() == "--sge")
            o.sge = cordma_bench::parse_number("--sge", r.value(), 1, 64);
        else if (r.name() == "--inline")
            o.inline_bytes = cordma_bench::parse_number("--inline", r.value(), 0, 4096);
        else if (r.name() == "--calls")
            o.calls = cordma_bench::parse_number("--calls", r.value(), 1, 1000000);
        else if (r.name() == "--ack-timeout")
            o.ack_timeout = cordma_bench::parse_number("--ack-timeout", r.value(), 1, 31);
        else if (r.name() == "--check-qps")
            o.check_qps = true;
        else if (r.name() == "--no-rnr")
            o.no_rnr = true;
        else if (r.name() == "--exchange") {
            std::string_view e = r.value();
            if (e != "cm" && e != "tcp")
                throw cordma_bench::usage_error("--exchange is cm or tcp, not '" + std::string(e) + "'");
            o.tcp = e == "tcp";
        } else if (r.name() == "--timeout")
            o.timeout_s = cordma_bench::parse_number("--timeout", r.value(), 1, 86400);
        else if (r.name() == "--kind") {
            std::string_view k = r.value();
            if (k == "plain")
                o.what = kind::plain;
            else if (k == "agent")
                o.what = kind::agent;
            else if (k == "rpc")
                o.what = kind::rpc;
            else
                throw cordma_bench::usage_error("--kind is plain, agent or rpc, not '" + std::string(k) + "'");
        } else
            throw cordma_bench::usage_error("unknown option '" + std::string(r.arg()) + "'");
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    try {
        o = parse(argc, argv);
    } catch (const cordma_bench::usage_error& e) {
        std::fprintf(stderr, "cordma_storm: %s\n", e.what());
        usage(stderr);
        return 2;
    }
    watchdog limit(o.timeout_s, o.serving ? "serve" : "connect");
    try {
        builder b = builder_for(o);
        if (!o.serving)
            return sync_wait(connect_all(o, b));
        if (o.what == kind::rpc) {
            if (serve_rpc(o, b) != 0)
                return 1;
        } else {
            sync_wait(serve_plain(o, b));  // returns once every client has closed
            if (o.check_qps) {
                long errors = qps_left_in_error();
                std::printf("queue pairs in the error state after every client closed: %ld\n", errors);
                if (errors != 0)
                    return 1;
            }
        }
        std::printf("served %ld connections\n", o.connections);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma_storm %s: %s\n", o.serving ? "serve" : "connect", e.what());
        return 1;
    }
}
