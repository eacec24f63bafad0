// cordma_rpc_bench: round trips and call rates of cordma::rpc, for
// bench/rpc/run, which puts the latency beside perftest's ib_send_lat on
// the same device.
//
// Server (-b ADDR): an rpc::server with one handler, method 1 "echo",
// whose response is the request's bytes (the same size), and method 2
// "quit", which the client calls once when it is done. It prints
// "listening on IP:PORT" once it listens (the readiness line
// tools/lib/server-then-client waits for), then serves until a client has
// called quit and every client has gone (or 5 s after the quit, if some
// connection lingers), and exits 0.
//
// Client (-s ADDR), one of:
//   --test lat    one connection, one call in flight (depth 1): for each
//                 size of --sizes, --warmup calls, then --iters calls, each
//                 timed from before client::call to the coroutine's
//                 resumption with the response: the full round trip (not
//                 halved, unlike ib_send_lat's figures). Prints p50, p99,
//                 p99.9, mean, min and max in microseconds.
//   --test tput   --clients rpc::client connections from this process (all
//                 on the builder's one event listener thread), each keeping
//                 --depth calls of --size bytes in flight: depth is calls in
//                 flight per client, so clients x depth in all, each a
//                 coroutine calling again as soon as its response is in.
//                 After --warmup-seconds, counts the calls answered in
//                 --seconds: calls/s, and the round trip of each (p50, p99).
// --verify fills every request with a pattern of its own and checks the
// response byte for byte (the run fails at the first wrong byte); without
// it, one request buffer is sent over and over, as perftest does.
//
// Timing: each sample with the time-stamp counter, as perftest and
// cordma-perf do (a clock_gettime costs over a microsecond where the VM's
// clocksource is not the TSC), turned into nanoseconds with a rate
// calibrated against steady_clock over each measurement.
//
// Every wait is bounded: --timeout (default 120 s) ends either side with
// status 3 if it is still running then; each call has client_options'
// deadline (10 s here); connects have the builder's connect_timeout.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/listener.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t echo_method = 1;
constexpr std::uint32_t quit_method = 2;

struct config {
    std::string server;  // -s: connect to it (client)
    std::string bind;    // -b: listen on it (server)
    std::string port = "7471";
    std::string device;
    polling_mode polling = polling_mode::busy;
    std::string test = "lat";
    std::vector<std::size_t> sizes{8, 64, 256, 1024, 4096};
    std::size_t size = 64;  // tput
    long iters = 5000;
    long warmup = 500;
    int clients = 1;
    int depth = 1;
    double seconds = 3;
    double warmup_seconds = 0.5;
    std::size_t eager_size = 4096;
    std::uint32_t credits = 64;
    std::size_t receives = 1024;
    bool verify = false;
    bool json = false;
    std::chrono::seconds timeout{120};
};

using cordma_bench::option_reader;
using cordma_bench::parse_polling;
using cordma_bench::usage_error;
using cordma_bench::parse_number;
using cordma_bench::parse_seconds;

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: cordma_rpc_bench (-b BIND_ADDR | -s SERVER_ADDR) [options]\n"
                 "  -b ADDR              server: listen on ADDR, answer method 1 (echo) until a client quits\n"
                 "  -s ADDR              client: connect to ADDR (or IP:PORT, then -p is ignored) and measure\n"
                 "  -p PORT              rdma_cm port (default 7471; 0 on the server: any free one)\n"
                 "  --polling MODE       busy (default), event, yielding or adaptive (builder::polling)\n"
                 "  -d, --device NAME    RDMA device (default: the first with an active port)\n"
                 "  --eager-size B       server_options/client_options::eager_size (default 4096)\n"
                 "  --timeout S          bound on the whole run, either side (default 120): status 3 past it\n"
                 "  --json               also print one JSON line per result\n"
                 "  --verify             a pattern of its own in every request, every response checked\n"
                 "server:\n"
                 "  --credits N          server_options::credits, calls in flight per client (default 64)\n"
                 "  --receives N         server_options::receives, for all clients (default 1024)\n"
                 "client:\n"
                 "  --test lat|tput      lat (default): depth 1, round trip per call; tput: calls/s\n"
                 "  --sizes LIST         lat: request (= response) sizes in bytes (default 8,64,256,1024,4096)\n"
                 "  --iters N            lat: timed calls per size (default 5000)\n"
                 "  --warmup N           lat: untimed calls before them (default 500)\n"
                 "  -S, --size B         tput: request (= response) size (default 64)\n"
                 "  --clients N          tput: rpc::client connections (default 1)\n"
                 "  --depth N            tput: calls in flight per client (default 1)\n"
                 "  --seconds S          tput: the timed window (default 3)\n"
                 "  --warmup-seconds S   tput: calls before the window (default 0.5)\n"
                 "What is measured: see the top of bench/rpc/cordma_rpc_bench.cpp.\n");
}

config parse(int argc, char** argv) {
    config cfg;
    for (option_reader options(argc, argv, usage); options.next();) {
        std::string_view arg = options.arg(), name = options.name();
        auto value = [&] { return options.value(); };
        if (name == "-s") {
            cfg.server = std::string(value());
        } else if (name == "-b") {
            cfg.bind = std::string(value());
        } else if (name == "-p") {
            cfg.port = std::to_string(parse_number(name, value(), 0, 65535));
        } else if (name == "--polling") {
            cfg.polling = parse_polling(value(), "busy, event, yielding or adaptive");
        } else if (name == "-d" || name == "--device") {
            cfg.device = std::string(value());
        } else if (name == "--test") {
            cfg.test = std::string(value());
            if (cfg.test != "lat" && cfg.test != "tput")
                throw usage_error("--test: '" + cfg.test + "' is not lat or tput");
        } else if (name == "--sizes") {
            std::string_view list = value();
            cfg.sizes.clear();
            while (!list.empty()) {
                auto comma = list.find(',');
                cfg.sizes.push_back(static_cast<std::size_t>(parse_number(name, list.substr(0, comma), 1, 1L << 30)));
                list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            }
            if (cfg.sizes.empty()) throw usage_error("--sizes needs at least one size");
        } else if (name == "-S" || name == "--size") {
            cfg.size = static_cast<std::size_t>(parse_number(name, value(), 1, 1L << 30));
        } else if (name == "--iters") {
            cfg.iters = parse_number(name, value(), 1, 1L << 30);
        } else if (name == "--warmup") {
            cfg.warmup = parse_number(name, value(), 0, 1L << 30);
        } else if (name == "--clients") {
            cfg.clients = static_cast<int>(parse_number(name, value(), 1, 1024));
        } else if (name == "--depth") {
            cfg.depth = static_cast<int>(parse_number(name, value(), 1, 1024));
        } else if (name == "--seconds") {
            cfg.seconds = parse_seconds(name, value());
        } else if (name == "--warmup-seconds") {
            cfg.warmup_seconds = parse_seconds(name, value());
        } else if (name == "--eager-size") {
            cfg.eager_size = static_cast<std::size_t>(parse_number(name, value(), 64, 1L << 20));
        } else if (name == "--credits") {
            cfg.credits = static_cast<std::uint32_t>(parse_number(name, value(), 1, 1024));
        } else if (name == "--receives") {
            cfg.receives = static_cast<std::size_t>(parse_number(name, value(), 1, 1L << 20));
        } else if (name == "--verify") {
            cfg.verify = true;
        } else if (name == "--json") {
            cfg.json = true;
        } else if (name == "--timeout") {
            cfg.timeout = std::chrono::seconds(parse_number(name, value(), 1, 86400));
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }
    if (cfg.server.empty() == cfg.bind.empty())
        throw usage_error("give one of -s SERVER_ADDR (client) and -b BIND_ADDR (server)");
    if (!cfg.server.empty() && cfg.port == "0" && cfg.server.find(':') == std::string::npos)
        throw usage_error("a client needs the server's port (-p, or -s IP:PORT)");
    return cfg;
}

const char* polling_name(polling_mode m) {
    switch (m) {
    case polling_mode::event: return "event";
    case polling_mode::busy: return "busy";
    case polling_mode::adaptive: return "adaptive";
    case polling_mode::yielding: return "yielding";
    }
    return "?";
}

/// Ends the process with status 3 if the run is still going after `limit`:
/// a bound on every wait, whatever hangs.
class watchdog {
public:
    watchdog(std::chrono::seconds limit, const char* role) {
        thread_ = std::thread([this, limit, role] {
            std::unique_lock lock(mutex_);
            if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
                std::fprintf(stderr, "cordma_rpc_bench %s: still running after --timeout %lld s; giving up\n", role,
                             static_cast<long long>(limit.count()));
                std::fflush(stdout);
                std::_Exit(3);
            }
        });
    }
    ~watchdog() {
        {
            std::lock_guard lock(mutex_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

// ---------------------------------------------------------------------------
// Timing

#if defined(__x86_64__)
inline std::uint64_t ticks() noexcept { return __builtin_ia32_rdtsc(); }
#else
inline std::uint64_t ticks() noexcept { return static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count()); }
#endif

/// Ticks and steady_clock together at the start of a measurement; ns_per_tick
/// at its end.
struct calibration {
    clock_type::time_point t0 = clock_type::now();
    std::uint64_t k0 = ticks();
    double seconds = 0;
    double ns_per_tick = 1;
    void finish() {
        auto t1 = clock_type::now();
        std::uint64_t k1 = ticks();
        seconds = std::chrono::duration<double>(t1 - t0).count();
        if (k1 > k0) ns_per_tick = seconds * 1e9 / static_cast<double>(k1 - k0);
    }
};

struct percentiles {
    double p50 = 0, p99 = 0, p99_9 = 0, mean = 0, min = 0, max = 0;
};

/// Nearest-rank percentiles of `samples` (ticks), in microseconds.
percentiles summarize(std::vector<std::uint64_t>& samples, double ns_per_tick) {
    percentiles p;
    if (samples.empty()) return p;
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) {
        std::size_t rank = static_cast<std::size_t>(q * static_cast<double>(samples.size()) + 0.999999);
        rank = std::clamp<std::size_t>(rank, 1, samples.size());
        return static_cast<double>(samples[rank - 1]) * ns_per_tick / 1e3;
    };
    p.p50 = at(0.50);
    p.p99 = at(0.99);
    p.p99_9 = at(0.999);
    double sum = 0;
    for (auto s : samples) sum += static_cast<double>(s);
    p.mean = sum / static_cast<double>(samples.size()) * ns_per_tick / 1e3;
    p.min = static_cast<double>(samples.front()) * ns_per_tick / 1e3;
    p.max = static_cast<double>(samples.back()) * ns_per_tick / 1e3;
    return p;
}

// ---------------------------------------------------------------------------
// Payloads for --verify

std::byte pattern(std::uint64_t seed, std::size_t i) {
    return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 8) * 13) & 0xff);
}

void fill(std::vector<std::byte>& bytes, std::uint64_t seed) {
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(seed, i);
}

/// Throws at the first wrong byte (or a wrong size).
void check(const std::vector<std::byte>& response, std::size_t size, std::uint64_t seed, const char* what) {
    if (response.size() != size)
        throw std::runtime_error(std::string(what) + ": a response of " + std::to_string(response.size()) +
                                 " bytes to a request of " + std::to_string(size));
    for (std::size_t i = 0; i < size; ++i)
        if (response[i] != pattern(seed, i))
            throw std::runtime_error(std::string(what) + ": response byte " + std::to_string(i) + " of " +
                                     std::to_string(size) + " is wrong (call seed " + std::to_string(seed) + ")");
}

/// co_await'ed on the event listener thread: resumes there after `delay`.
/// Trivially destructible, and always named before co_await (g++ 12).
struct sleep_for {
    event_listener* listener;
    std::chrono::nanoseconds delay;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { listener->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

// ---------------------------------------------------------------------------
// Server

struct server_counters {
    std::atomic<std::uint64_t> calls{0};
    bool quit = false;
    clock_type::time_point quit_at{};
    bool serving = true;
};

task<std::vector<std::byte>> echo(rpc::request r, server_counters* counters) {
    counters->calls.fetch_add(1, std::memory_order_relaxed);
    co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
}

task<std::vector<std::byte>> quit(rpc::request, server_counters* counters) {
    if (!counters->quit) {
        counters->quit = true;
        counters->quit_at = clock_type::now();
    }
    co_return std::vector<std::byte>{};
}

/// Stops `stop` once a client has called quit and every client has gone
/// (or 5 s after the quit, if some connection lingers).
task<void> watch_for_quit(rpc::server* server, server_counters* counters, event_listener* el,
                          std::stop_source* stop) {
    while (counters->serving) {
        sleep_for pause{el, std::chrono::milliseconds(5)};
        co_await pause;
        if (!counters->quit || !counters->serving) continue;
        std::size_t left = server->clients();
        bool lingering = clock_type::now() - counters->quit_at > std::chrono::seconds(5);
        if (left == 0 || lingering) {
            if (left != 0)
                std::fprintf(stderr, "cordma_rpc_bench server: %zu client(s) still connected 5 s after quit; "
                             "stopping anyway\n", left);
            stop->request_stop();
            break;
        }
    }
}

task<void> serve_until_quit(rpc::server* server, listener l, server_counters* counters, event_listener* el) {
    co_await el->schedule();
    std::stop_source stop;
    task_group group;
    group.spawn(watch_for_quit(server, counters, el, &stop));
    std::exception_ptr failed;
    try {
        co_await server->serve(l, stop.get_token());
    } catch (...) {
        failed = std::current_exception();
    }
    counters->serving = false;
    co_await group.join();
    if (failed) std::rethrow_exception(failed);
}

int run_server(const config& cfg) {
    watchdog guard(cfg.timeout, "server");
    builder b;
    b.polling(cfg.polling);
    if (!cfg.device.empty()) b.device(cfg.device);
    server_counters counters;
    rpc::server server(b, {.eager_size = cfg.eager_size, .receives = cfg.receives, .credits = cfg.credits});
    server.handle(echo_method, "echo", [c = &counters](rpc::request r) { return echo(r, c); });
    server.handle(quit_method, "quit", [c = &counters](rpc::request r) { return quit(r, c); });
    listener l = b.listen(cfg.bind + ":" + cfg.port);
    std::printf("listening on %s\n", l.address().c_str());
    std::printf("cordma_rpc_bench server: polling %s, credits %u, receives %zu, eager_size %zu\n",
                polling_name(cfg.polling), cfg.credits, cfg.receives, cfg.eager_size);
    std::fflush(stdout);
    auto el = b.event_listener();
    sync_wait(serve_until_quit(&server, l, &counters, el.get()));
    std::printf("cordma_rpc_bench server: answered %llu echo calls\n",
                static_cast<unsigned long long>(counters.calls.load()));
    std::fflush(stdout);
    return 0;
}

// ---------------------------------------------------------------------------
// Client: latency

struct lat_result {
    std::size_t bytes = 0;
    long iters = 0;
    percentiles us;
    double seconds = 0;
    double ns_per_tick = 1;
};

task<lat_result> latency_of(rpc::client* c, std::size_t size, long warmup, long iters, bool verify) {
    std::vector<std::byte> request(size);
    fill(request, 0);
    std::uint64_t seed = 1;
    for (long i = 0; i < warmup; ++i) {
        if (verify) fill(request, seed);
        std::vector<std::byte> response = co_await c->call(echo_method, request);
        if (verify) check(response, size, seed, "warm-up");
        ++seed;
    }
    std::vector<std::uint64_t> samples(static_cast<std::size_t>(iters));
    calibration cal;
    for (long i = 0; i < iters; ++i) {
        if (verify) fill(request, seed);
        std::uint64_t a = ticks();
        std::vector<std::byte> response = co_await c->call(echo_method, request);
        std::uint64_t z = ticks();
        samples[static_cast<std::size_t>(i)] = z - a;
        if (verify) check(response, size, seed, "latency");
        ++seed;
    }
    cal.finish();
    lat_result r;
    r.bytes = size;
    r.iters = iters;
    r.seconds = cal.seconds;
    r.ns_per_tick = cal.ns_per_tick;
    r.us = summarize(samples, cal.ns_per_tick);
    co_return r;
}

void print_latency(const config& cfg, const lat_result& r) {
    std::printf("lat %8zu B %8ld calls  p50 %9.2f  p99 %9.2f  p99.9 %9.2f  mean %9.2f  min %9.2f  max %9.2f us\n",
                r.bytes, r.iters, r.us.p50, r.us.p99, r.us.p99_9, r.us.mean, r.us.min, r.us.max);
    if (cfg.json)
        std::printf("{\"impl\":\"cordma\",\"test\":\"lat\",\"polling\":\"%s\",\"bytes\":%zu,\"iters\":%ld,"
                    "\"warmup\":%ld,\"p50_us\":%.3f,\"p99_us\":%.3f,\"p99_9_us\":%.3f,\"mean_us\":%.3f,"
                    "\"min_us\":%.3f,\"max_us\":%.3f,\"seconds\":%.3f,\"ns_per_tick\":%.5f,\"verified\":%s}\n",
                    polling_name(cfg.polling), r.bytes, r.iters, cfg.warmup, r.us.p50, r.us.p99, r.us.p99_9,
                    r.us.mean, r.us.min, r.us.max, r.seconds, r.ns_per_tick, cfg.verify ? "true" : "false");
    std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// Client: throughput

struct tput_state {
    bool measuring = false;
    bool stop = false;
    std::uint64_t answered = 0;  // in the window
    std::vector<std::uint64_t> samples;
    std::uint64_t next_seed = 1;
};

/// One of a client's `depth` coroutines: a call, then the next, until stopped.
task<void> lane(rpc::client* c, tput_state* st, std::size_t size, bool verify) {
    std::vector<std::byte> request(size);
    fill(request, 0);
    while (!st->stop) {
        std::uint64_t seed = st->next_seed++;
        if (verify) fill(request, seed);
        std::uint64_t a = ticks();
        std::vector<std::byte> response = co_await c->call(echo_method, request);
        std::uint64_t z = ticks();
        if (st->measuring) {
            ++st->answered;
            st->samples.push_back(z - a);
        }
        if (verify) check(response, size, seed, "throughput");
    }
}

struct tput_result {
    std::uint64_t calls = 0;
    double seconds = 0;
    percentiles us;
    double ns_per_tick = 1;
};

task<tput_result> throughput_of(std::vector<rpc::client>* clients, const config* cfg, event_listener* el) {
    tput_state st;
    st.samples.reserve(1 << 20);
    task_group lanes;
    for (auto& c : *clients)
        for (int d = 0; d < cfg->depth; ++d) lanes.spawn(lane(&c, &st, cfg->size, cfg->verify));
    std::exception_ptr failed;
    tput_result r;
    try {
        sleep_for warm{el, std::chrono::nanoseconds(static_cast<long long>(cfg->warmup_seconds * 1e9))};
        co_await warm;
        calibration cal;
        st.measuring = true;
        sleep_for window{el, std::chrono::nanoseconds(static_cast<long long>(cfg->seconds * 1e9))};
        co_await window;
        st.measuring = false;
        cal.finish();
        r.calls = st.answered;
        r.seconds = cal.seconds;
        r.ns_per_tick = cal.ns_per_tick;
    } catch (...) {
        failed = std::current_exception();
    }
    st.stop = true;
    co_await lanes.join();  // rethrows a lane's failure (a wrong byte, an rpc_error)
    if (failed) std::rethrow_exception(failed);
    r.us = summarize(st.samples, r.ns_per_tick);
    co_return r;
}

void print_throughput(const config& cfg, const tput_result& r) {
    double rate = r.seconds > 0 ? static_cast<double>(r.calls) / r.seconds : 0;
    std::printf("tput %6zu B  %3d clients x depth %4d  %10llu calls in %.3f s  %12.1f calls/s  "
                "p50 %9.2f  p99 %9.2f us\n",
                cfg.size, cfg.clients, cfg.depth, static_cast<unsigned long long>(r.calls), r.seconds, rate, r.us.p50,
                r.us.p99);
    if (cfg.json)
        std::printf("{\"impl\":\"cordma\",\"test\":\"tput\",\"polling\":\"%s\",\"bytes\":%zu,\"clients\":%d,"
                    "\"depth\":%d,\"calls\":%llu,\"seconds\":%.4f,\"calls_per_s\":%.1f,\"p50_us\":%.3f,"
                    "\"p99_us\":%.3f,\"mean_us\":%.3f,\"max_us\":%.3f,\"warmup_seconds\":%.3f,\"ns_per_tick\":%.5f,"
                    "\"verified\":%s}\n",
                    polling_name(cfg.polling), cfg.size, cfg.clients, cfg.depth,
                    static_cast<unsigned long long>(r.calls), r.seconds, rate, r.us.p50, r.us.p99, r.us.mean,
                    r.us.max, cfg.warmup_seconds, r.ns_per_tick, cfg.verify ? "true" : "false");
    std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// Client: the session

task<void> client_session(builder b, config cfg) {
    auto el = b.event_listener();
    co_await el->schedule();
    const std::string address =
        cfg.server.find(':') == std::string::npos ? cfg.server + ":" + cfg.port : cfg.server;
    rpc::client_options options;
    options.eager_size = cfg.eager_size;
    options.deadline = std::chrono::milliseconds(10'000);
    std::vector<rpc::client> clients;
    const int n = cfg.test == "tput" ? cfg.clients : 1;
    clients.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        rpc::client c = co_await rpc::client::connect(b, address, options);
        clients.push_back(std::move(c));
    }
    if (cfg.test == "tput" && clients.front().credits() < static_cast<std::uint32_t>(cfg.depth))
        std::fprintf(stderr, "cordma_rpc_bench: note: the server grants %u calls in flight per client, fewer "
                     "than --depth %d: the rest wait in the client\n", clients.front().credits(), cfg.depth);
    if (cfg.test == "lat") {
        for (std::size_t size : cfg.sizes) {
            lat_result r = co_await latency_of(&clients.front(), size, cfg.warmup, cfg.iters, cfg.verify);
            print_latency(cfg, r);
        }
    } else {
        tput_result r = co_await throughput_of(&clients, &cfg, el.get());
        print_throughput(cfg, r);
    }
    // Tell the server it may go once every connection has closed.
    std::vector<std::byte> nothing;
    std::vector<std::byte> bye = co_await clients.front().call(quit_method, nothing);
    (void)bye;
    for (auto& c : clients) co_await c.close();
}

int run_client(const config& cfg) {
    watchdog guard(cfg.timeout, "client");
    builder b;
    b.polling(cfg.polling);
    if (!cfg.device.empty()) b.device(cfg.device);
    sync_wait(client_session(b, cfg));
    return 0;
}

}  // namespace

int main(int argc, char** argv) try {
    config cfg = parse(argc, argv);
    return cfg.server.empty() ? run_server(cfg) : run_client(cfg);
} catch (const usage_error& e) {
    std::fprintf(stderr, "cordma_rpc_bench: %s\n", e.what());
    usage(stderr);
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "cordma_rpc_bench: %s\n", e.what());
    return 1;
}
