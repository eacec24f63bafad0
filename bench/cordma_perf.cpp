// cordma-perf: latency and bandwidth of RDMA operations through cordma's
// public API, in the spirit of perftest's ib_*_lat and ib_*_bw, so the two
// can be run with matching parameters and compared (bench/compare does).
//
// Everything runs inside one sync_wait, on the event listener thread (the
// first thing the top coroutine does is co_await listener->schedule()), so
// each operation is posted and resumed on the thread that polls its
// completion: no thread hop, no allocation per operation.
//
// Only the in-process loopback mode exists for now: two connections joined
// on one device by connect_loopback, both served by one listener.

#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

#ifndef CORDMA_VERSION
#define CORDMA_VERSION "unknown"
#endif

using namespace cordma;

namespace {

// ---------------------------------------------------------------------------
// Command line

enum class op_type { write, read, send, write_imm, fetch_add };
enum class test_type { latency, bandwidth };

const char* to_string(op_type op) {
    switch (op) {
    case op_type::write: return "write";
    case op_type::read: return "read";
    case op_type::send: return "send";
    case op_type::write_imm: return "write_imm";
    case op_type::fetch_add: return "fetch_add";
    }
    return "?";
}

const char* to_string(test_type test) { return test == test_type::latency ? "latency" : "bandwidth"; }

/// Ops whose latency is measured as a ping-pong between the two sides (the
/// receiver learns of each message from a receive completion).
bool is_ping_pong(op_type op) { return op == op_type::send || op == op_type::write_imm; }

/// Ops the receiving side must post receives for.
bool needs_receives(op_type op) { return is_ping_pong(op); }

constexpr std::size_t sweep_min = 2;
constexpr std::size_t sweep_max = std::size_t{1} << 20;
constexpr std::size_t size_limit = std::size_t{1} << 30;

struct config {
    std::string mode = "loopback";
    op_type op = op_type::write;
    test_type test = test_type::latency;
    std::vector<std::size_t> sizes;  // empty: the default for the op
    bool sweep = false;
    std::uint64_t iterations = 0;    // 0: the default for the test
    std::optional<std::uint64_t> warmup;
    unsigned depth = 0;              // 0: the default for the test
    unsigned qp_depth = 128;
    unsigned qps = 1;
    polling_mode polling = polling_mode::busy;
    std::string device;
    bool full_round_trip = false;
    bool json = false;
    bool quiet = false;
};

class usage_error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

constexpr const char* usage_text = R"(usage: cordma-perf [options]

Measures the latency or bandwidth of one RDMA operation through cordma, like
perftest's ib_write_lat / ib_write_bw and friends.

  -m, --mode MODE          loopback (two connections on one device, in this
                           process; the default). server and client: not yet.
  -o, --op OP              write (default), read, send (send/recv),
                           write_imm (write with immediate), fetch_add
  -t, --test TEST          lat|latency (default) or bw|bandwidth
  -s, --size BYTES         message size; K and M suffixes (64, 4K, 1M); a
                           comma list runs each (8,64,4K). Default 64
                           (fetch_add: 8, the only size it has)
  -a, --all                sweep sizes 2 B to 1 MiB in powers of two
  -n, --iterations N       measured operations per size (default: latency
                           1000, bandwidth 5000)
  -w, --warmup N           operations before measuring (default: n/10,
                           at most 1000)
  -D, --depth N            outstanding operations = concurrent coroutines
                           (default: latency 1, bandwidth 64)
  -q, --qp-depth N         send and receive queue entries per QP (default 128)
  -Q, --qps N              connections (QP pairs); the coroutines are spread
                           over them (default 1)
  -p, --polling MODE       busy (default, like perftest), adaptive or event
  -d, --device NAME        RDMA device (default: the first with an active port)
      --full               latency: report full round trips for every op
                           (default: as perftest does, see below)
      --json               print one JSON document instead of tables
      --quiet              no progress lines on stderr during sweeps
  -h, --help               this text

Latency is reported the way perftest's ib_*_lat report it:
  write      half round trip: each sample is one write from post to its
             completion (the write and its ACK: two trips through the
             fabric, as in ib_write_lat's ping-pong of two writes), halved
  send,      half round trip: a ping-pong between the two connections, each
  write_imm  side answering the other's message when its receive completes;
             the round trip halved, as ib_send_lat does
  read,      full: post to completion, as ib_read_lat and ib_atomic_lat
  fetch_add  report them
--full reports the whole round trip for every op instead.
Bandwidth is MB/s of 2^20 bytes (as perftest counts), million messages per
second, and process CPU time (every thread) per operation.
)";

std::string_view trim(std::string_view s) {
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
    return s;
}

std::uint64_t parse_number(std::string_view option, std::string_view text, std::uint64_t min, std::uint64_t max) {
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        throw usage_error(std::string(option) + ": '" + std::string(text) + "' is not a whole number");
    if (value < min || value > max)
        throw usage_error(std::string(option) + ": " + std::string(text) + " is out of range (" +
                          std::to_string(min) + " to " + std::to_string(max) + ")");
    return value;
}

std::size_t parse_size(std::string_view option, std::string_view text) {
    text = trim(text);
    std::uint64_t scale = 1;
    if (!text.empty()) {
        switch (text.back()) {
        case 'k': case 'K': scale = 1024; break;
        case 'm': case 'M': scale = 1024 * 1024; break;
        case 'g': case 'G': scale = 1024 * 1024 * 1024; break;
        default: break;
        }
        if (scale != 1)
            text.remove_suffix(1);
        if (!text.empty() && (text.back() == 'i' || text.back() == 'I'))
            throw usage_error(std::string(option) + ": write sizes as 4K or 1M (binary units), not 'KiB'");
    }
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        throw usage_error(std::string(option) + ": '" + std::string(text) +
                          "' is not a size (bytes, with an optional K or M suffix: 64, 4K, 1M)");
    if (value == 0 || value > size_limit / scale)
        throw usage_error(std::string(option) + ": sizes run from 1 byte to 1G");
    return static_cast<std::size_t>(value * scale);
}

polling_mode parse_polling(std::string_view text) {
    if (text == "busy") return polling_mode::busy;
    if (text == "event") return polling_mode::event;
    if (text == "adaptive") return polling_mode::adaptive;
    if (text == "yielding") return polling_mode::yielding;
    throw usage_error("--polling: '" + std::string(text) + "' is not a polling mode (busy, adaptive, event)");
}

op_type parse_op(std::string_view text) {
    if (text == "write") return op_type::write;
    if (text == "read") return op_type::read;
    if (text == "send") return op_type::send;
    if (text == "write_imm" || text == "write_with_imm") return op_type::write_imm;
    if (text == "fetch_add") return op_type::fetch_add;
    throw usage_error("--op: '" + std::string(text) + "' is not an operation (write, read, send, write_imm, fetch_add)");
}

test_type parse_test(std::string_view text) {
    if (text == "lat" || text == "latency") return test_type::latency;
    if (text == "bw" || text == "bandwidth") return test_type::bandwidth;
    throw usage_error("--test: '" + std::string(text) + "' is not a test (lat, bw)");
}

/// Parses argv; returns nullopt after printing --help.
std::optional<config> parse_arguments(int argc, char** argv) {
    config cfg;
    bool size_given = false;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        std::string_view name = arg;
        std::optional<std::string_view> inline_value;
        if (arg.starts_with("--")) {
            if (auto eq = arg.find('='); eq != std::string_view::npos) {
                name = arg.substr(0, eq);
                inline_value = arg.substr(eq + 1);
            }
        }
        auto value = [&]() -> std::string_view {
            if (inline_value)
                return *inline_value;
            if (i + 1 >= argc)
                throw usage_error(std::string(name) + " needs a value");
            return argv[++i];
        };
        auto flag = [&] {
            if (inline_value)
                throw usage_error(std::string(name) + " takes no value");
        };
        if (name == "-h" || name == "--help") {
            std::fputs(usage_text, stdout);
            return std::nullopt;
        } else if (name == "-m" || name == "--mode") {
            cfg.mode = value();
        } else if (name == "-o" || name == "--op") {
            cfg.op = parse_op(value());
        } else if (name == "-t" || name == "--test") {
            cfg.test = parse_test(value());
        } else if (name == "-s" || name == "--size") {
            std::string_view list = value();
            cfg.sizes.clear();
            size_given = true;
            while (!list.empty()) {
                auto comma = list.find(',');
                cfg.sizes.push_back(parse_size(name, list.substr(0, comma)));
                list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            }
            if (cfg.sizes.empty())
                throw usage_error("--size needs at least one size");
        } else if (name == "-a" || name == "--all") {
            flag();
            cfg.sweep = true;
        } else if (name == "-n" || name == "--iterations") {
            cfg.iterations = parse_number(name, value(), 1, 1'000'000'000);
        } else if (name == "-w" || name == "--warmup") {
            cfg.warmup = parse_number(name, value(), 0, 1'000'000'000);
        } else if (name == "-D" || name == "--depth") {
            cfg.depth = static_cast<unsigned>(parse_number(name, value(), 1, 65536));
        } else if (name == "-q" || name == "--qp-depth") {
            cfg.qp_depth = static_cast<unsigned>(parse_number(name, value(), 1, 1 << 20));
        } else if (name == "-Q" || name == "--qps") {
            cfg.qps = static_cast<unsigned>(parse_number(name, value(), 1, 1024));
        } else if (name == "-p" || name == "--polling") {
            cfg.polling = parse_polling(value());
        } else if (name == "-d" || name == "--device") {
            cfg.device = value();
        } else if (name == "--full") {
            flag();
            cfg.full_round_trip = true;
        } else if (name == "--json") {
            flag();
            cfg.json = true;
        } else if (name == "--quiet") {
            flag();
            cfg.quiet = true;
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }

    if (cfg.mode == "server" || cfg.mode == "client")
        throw usage_error("--mode " + cfg.mode +
                          ": not yet: runs across processes need cordma's connection builder, which is not "
                          "there yet; use --mode loopback");
    if (cfg.mode != "loopback")
        throw usage_error("--mode: '" + cfg.mode + "' is not a mode (loopback; server and client later)");
    if (cfg.sweep && size_given)
        throw usage_error("--all and --size both choose sizes: give one of them");
    if (cfg.op == op_type::fetch_add) {
        if (cfg.sweep || (size_given && (cfg.sizes.size() != 1 || cfg.sizes[0] != 8)))
            throw usage_error("--op fetch_add works on one 8-byte word: drop --size and --all");
        cfg.sizes = {8};
    }
    if (cfg.sweep)
        for (std::size_t s = sweep_min; s <= sweep_max; s *= 2)
            cfg.sizes.push_back(s);
    if (cfg.sizes.empty())
        cfg.sizes = {64};
    if (cfg.iterations == 0)
        cfg.iterations = cfg.test == test_type::latency ? 1000 : 5000;
    if (!cfg.warmup)
        cfg.warmup = std::min<std::uint64_t>(cfg.iterations / 10, 1000);
    if (cfg.depth == 0)
        cfg.depth = cfg.test == test_type::latency ? cfg.qps : std::max(64u, cfg.qps);
    if (cfg.depth < cfg.qps)
        throw usage_error("--depth " + std::to_string(cfg.depth) + " is less than --qps " +
                          std::to_string(cfg.qps) + ": every QP needs at least one coroutine");
    if (cfg.test == test_type::latency && is_ping_pong(cfg.op) && cfg.depth != cfg.qps)
        throw usage_error(std::string("--test lat --op ") + to_string(cfg.op) +
                          " is a ping-pong with one message in flight per QP: --depth must equal --qps "
                          "(use --qps for concurrent ping-pongs)");
    if (cfg.iterations < cfg.qps)
        throw usage_error("--iterations " + std::to_string(cfg.iterations) + " is less than --qps " +
                          std::to_string(cfg.qps));
    return cfg;
}

// ---------------------------------------------------------------------------
// Measurement helpers

using clock_type = std::chrono::steady_clock;

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::uint64_t nanoseconds_between(clock_type::time_point a, clock_type::time_point b) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

/// The timestamp each latency sample is taken with. On x86-64 the time-stamp
/// counter, as perftest uses: a clock_gettime costs ~20 ns natively but over
/// a microsecond where the clocksource is not the TSC (HPET in a VM), which
/// would be counted in every sample. Ticks are turned into nanoseconds with
/// a rate calibrated against steady_clock over each measured phase.
#if defined(__x86_64__)
inline std::uint64_t ticks() noexcept { return __builtin_ia32_rdtsc(); }
#else
inline std::uint64_t ticks() noexcept {
    return static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count());
}
#endif

/// A counting wake-up between coroutines that all live on the listener
/// thread: no locks or atomics, and notify() resumes the waiter inline.
class arrival_signal {
public:
    auto wait() noexcept {
        struct awaiter {
            arrival_signal* self;
            bool await_ready() const noexcept {
                if (self->count_ == 0)
                    return false;
                --self->count_;
                return true;
            }
            void await_suspend(std::coroutine_handle<> h) noexcept { self->waiter_ = h; }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }

    void notify() noexcept {
        if (waiter_)
            std::exchange(waiter_, {}).resume();
        else
            ++count_;
    }

private:
    std::coroutine_handle<> waiter_;
    std::uint64_t count_ = 0;
};

/// Operations handed out to the coroutines of one QP in one phase.
struct op_counter {
    std::uint64_t total = 0;
    std::uint64_t next = 0;
    bool claim() noexcept { return next < total && (++next, true); }
};

/// One loopback pair: `client` issues the measured operations to `server`.
struct qp_pair {
    connection client;
    connection server;
    std::shared_ptr<memory_pool> pool;
    local_mr client_buffer;
    local_mr server_buffer;

    // Per phase.
    op_counter ops;
    op_counter client_receives;
    op_counter server_receives;
    arrival_signal client_arrivals;
    arrival_signal server_arrivals;
};

struct phase_result {
    double ns_per_tick = 1;  // for the samples
    double seconds = 0;
    double cpu_seconds = 0;
    std::uint64_t sleeps = 0;
};

constexpr std::uint32_t ping_imm = 0x70696e67;  // "ping"

/// The awaitable for one `Op` of local.size() bytes from `from` into the
/// peer's `remote`. A plain function returning the operation itself: a task
/// per operation would cost a coroutine frame (an allocation) each.
template <op_type Op>
auto start_op(connection& from, const local_slice& local, const remote_slice& remote) {
    if constexpr (Op == op_type::write)
        return from.write(local, remote);
    else if constexpr (Op == op_type::read)
        return from.read(local, remote);
    else if constexpr (Op == op_type::send)
        return from.send(local);
    else if constexpr (Op == op_type::write_imm)
        return from.write_with_imm(local, remote, ping_imm);
    else
        return from.fetch_add(remote, 1);
}

/// Issues operations from the client until the pair's counter runs out;
/// records each one's post-to-completion time when `samples` is given.
template <op_type Op>
task<void> one_sided_worker(qp_pair& pair, std::size_t size, std::vector<std::uint64_t>* samples) {
    local_slice local = pair.client_buffer.slice(0, size);
    remote_slice remote = pair.server_buffer.remote().slice(0, size);
    while (pair.ops.claim()) {
        std::uint64_t start = ticks();
        (void)co_await start_op<Op>(pair.client, local, remote);
        if (samples != nullptr)
            samples->push_back(ticks() - start);
    }
}

/// Keeps a receive posted on `conn` until `counter` runs out, and signals
/// each arrival. Several run per side so that one is always posted.
template <op_type Op>
task<void> receiver(connection& conn, local_slice into, op_counter& counter, arrival_signal& arrivals) {
    while (counter.claim()) {
        if constexpr (Op == op_type::send)
            (void)co_await conn.recv(into);
        else
            (void)co_await conn.recv_imm();
        arrivals.notify();
    }
}

/// The client half of a ping-pong: send, wait for the answer, repeat.
template <op_type Op>
task<void> pinger(qp_pair& pair, std::size_t size, std::uint64_t count, std::vector<std::uint64_t>* samples) {
    local_slice local = pair.client_buffer.slice(0, size);
    remote_slice remote = pair.server_buffer.remote().slice(0, size);
    for (std::uint64_t i = 0; i < count; ++i) {
        std::uint64_t start = ticks();
        co_await start_op<Op>(pair.client, local, remote);
        co_await pair.client_arrivals.wait();
        if (samples != nullptr)
            samples->push_back(ticks() - start);
    }
}

/// The server half: answer each message as soon as its receive completes.
template <op_type Op>
task<void> ponger(qp_pair& pair, std::size_t size, std::uint64_t count) {
    local_slice local = pair.server_buffer.slice(0, size);
    remote_slice remote = pair.client_buffer.remote().slice(0, size);
    for (std::uint64_t i = 0; i < count; ++i) {
        co_await pair.server_arrivals.wait();
        co_await start_op<Op>(pair.server, local, remote);
    }
}

/// Calls fn.template operator()<Op>() for the runtime `op`.
template <class Fn>
decltype(auto) with_op(op_type op, Fn&& fn) {
    switch (op) {
    case op_type::write: return fn.template operator()<op_type::write>();
    case op_type::read: return fn.template operator()<op_type::read>();
    case op_type::send: return fn.template operator()<op_type::send>();
    case op_type::write_imm: return fn.template operator()<op_type::write_imm>();
    case op_type::fetch_add: break;
    }
    return fn.template operator()<op_type::fetch_add>();
}

/// Receives kept posted per side, so that a message never finds the receive
/// queue empty (that would cost a receiver-not-ready retry of 0.64 ms): two
/// for a ping-pong (one message in flight each way), a full queue otherwise,
/// as perftest's ib_send_bw does.
unsigned receivers_per_side(const config& cfg, bool ping_pong) { return ping_pong ? 2u : cfg.qp_depth; }

/// Runs `count` operations of `size` bytes spread over every pair, with
/// cfg.depth coroutines, and times them.
task<phase_result> run_phase(std::vector<qp_pair>& pairs, const config& cfg, event_listener& listener,
                             std::size_t size, std::uint64_t count, std::vector<std::uint64_t>* samples) {
    const unsigned qps = static_cast<unsigned>(pairs.size());
    const bool ping_pong = cfg.test == test_type::latency && is_ping_pong(cfg.op);
    for (unsigned k = 0; k < qps; ++k) {
        std::uint64_t share = count / qps + (k < count % qps ? 1 : 0);
        pairs[k].ops = {share, 0};
        pairs[k].server_receives = {needs_receives(cfg.op) ? share : 0, 0};
        pairs[k].client_receives = {ping_pong ? share : 0, 0};
    }

    task_group group;
    // Receives first, so that nothing sent finds an empty receive queue.
    if (needs_receives(cfg.op)) {
        for (qp_pair& p : pairs) {
            for (unsigned r = 0; r < receivers_per_side(cfg, ping_pong); ++r) {
                with_op(cfg.op, [&]<op_type Op> {
                    group.spawn(receiver<Op>(p.server, p.server_buffer.slice(0, size), p.server_receives,
                                             p.server_arrivals));
                    if (ping_pong)
                        group.spawn(receiver<Op>(p.client, p.client_buffer.slice(0, size), p.client_receives,
                                                 p.client_arrivals));
                });
            }
        }
    }

    phase_result result;
    std::uint64_t sleeps = listener.sleeps();
    double cpu = process_cpu_seconds();
    auto start = clock_type::now();
    std::uint64_t start_ticks = ticks();
    with_op(cfg.op, [&]<op_type Op> {
        if (ping_pong) {
            for (qp_pair& p : pairs) {
                group.spawn(ponger<Op>(p, size, p.ops.total));
                group.spawn(pinger<Op>(p, size, p.ops.total, samples));
            }
        } else {
            for (unsigned w = 0; w < cfg.depth; ++w)
                group.spawn(one_sided_worker<Op>(pairs[w % qps], size, samples));
        }
    });
    co_await group.join();
    std::uint64_t end_ticks = ticks();
    auto end = clock_type::now();
    if (end_ticks > start_ticks)
        result.ns_per_tick = static_cast<double>(nanoseconds_between(start, end)) /
                             static_cast<double>(end_ticks - start_ticks);
    result.cpu_seconds = process_cpu_seconds() - cpu;
    result.seconds = static_cast<double>(nanoseconds_between(start, end)) * 1e-9;
    result.sleeps = listener.sleeps() - sleeps;
    co_return result;
}

// ---------------------------------------------------------------------------
// Results

struct latency_stats {
    double min = 0, p50 = 0, p99 = 0, p99_9 = 0, max = 0, avg = 0;
};

/// Nearest-rank percentiles of `ns` (in ticks of `ns_per_tick` nanoseconds),
/// in microseconds, each divided by `divisor`.
latency_stats summarize(std::vector<std::uint64_t>& ns, double ns_per_tick, double divisor) {
    latency_stats s;
    if (ns.empty())
        return s;
    std::sort(ns.begin(), ns.end());
    auto rank = [&](double q) {
        auto index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(ns.size())));
        return static_cast<double>(ns[std::clamp<std::size_t>(index, 1, ns.size()) - 1]);
    };
    double scale = ns_per_tick * 1e-3 / divisor;
    double sum = 0;
    for (auto v : ns)
        sum += static_cast<double>(v);
    s.min = static_cast<double>(ns.front()) * scale;
    s.p50 = rank(0.50) * scale;
    s.p99 = rank(0.99) * scale;
    s.p99_9 = rank(0.999) * scale;
    s.max = static_cast<double>(ns.back()) * scale;
    s.avg = sum / static_cast<double>(ns.size()) * scale;
    return s;
}

struct size_result {
    std::size_t bytes = 0;
    std::uint64_t iterations = 0;
    // Latency.
    latency_stats reported;  // half or full, as `basis` says
    latency_stats full;
    // Bandwidth.
    double seconds = 0;
    double mb_per_s = 0;
    double mmsg_per_s = 0;
    double cpu_us_per_op = 0;
    double cpu_utilization = 0;
    std::uint64_t sleeps = 0;
};

/// "half" or "full": what the reported latency is.
const char* latency_basis(const config& cfg) {
    if (cfg.full_round_trip || cfg.op == op_type::read || cfg.op == op_type::fetch_add)
        return "full";
    return "half";
}

std::string latency_derivation(const config& cfg) {
    std::string what;
    switch (cfg.op) {
    case op_type::write:
        what = "each sample is one RDMA write from post to its completion, which needs the write and its ACK "
               "(two trips through the fabric, as ib_write_lat's ping-pong of two writes)";
        break;
    case op_type::read:
        what = "each sample is one RDMA read from post to its completion (request and response)";
        break;
    case op_type::fetch_add:
        what = "each sample is one fetch_add from post to its completion (request and response)";
        break;
    case op_type::send:
    case op_type::write_imm:
        what = std::string("each sample is a ping-pong round trip: the client's ") + to_string(cfg.op) +
               " until the server's answering " + to_string(cfg.op) +
               " completes a receive on the client (the server answers when its receive completes)";
        break;
    }
    if (std::string_view(latency_basis(cfg)) == "half")
        return what + "; reported halved (half round trip), as ib_write_lat and ib_send_lat report RTT/2";
    if (cfg.op == op_type::read || cfg.op == op_type::fetch_add)
        return what + "; reported whole (full round trip), as ib_read_lat and ib_atomic_lat do";
    return what + "; reported whole (full round trip, --full)";
}

std::string json_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += c;
            }
        }
    }
    return out;
}

std::string json_latency(const latency_stats& s) {
    char buf[256];
    std::snprintf(buf, sizeof buf, R"({"min": %.3f, "p50": %.3f, "p99": %.3f, "p99_9": %.3f, "max": %.3f, "avg": %.3f})",
                  s.min, s.p50, s.p99, s.p99_9, s.max, s.avg);
    return buf;
}

void print_json(const config& cfg, const std::string& device, const std::vector<size_result>& results) {
    std::printf("{\n  \"tool\": \"cordma-perf\",\n  \"version\": \"%s\",\n", CORDMA_VERSION);
    std::printf("  \"mode\": \"%s\",\n  \"device\": \"%s\",\n", json_escape(cfg.mode).c_str(),
                json_escape(device).c_str());
    std::printf("  \"op\": \"%s\",\n  \"test\": \"%s\",\n  \"polling\": \"%s\",\n", to_string(cfg.op),
                to_string(cfg.test), cordma::to_string(cfg.polling));
    std::printf("  \"qps\": %u,\n  \"depth\": %u,\n  \"qp_depth\": %u,\n", cfg.qps, cfg.depth, cfg.qp_depth);
    std::printf("  \"iterations\": %" PRIu64 ",\n  \"warmup\": %" PRIu64 ",\n", cfg.iterations, *cfg.warmup);
    if (cfg.test == test_type::latency) {
        std::printf("  \"latency_unit\": \"us\",\n  \"latency_basis\": \"%s\",\n", latency_basis(cfg));
        std::printf("  \"latency_derivation\": \"%s\",\n", json_escape(latency_derivation(cfg)).c_str());
    } else {
        std::printf("  \"mb\": 1048576,\n  \"cpu\": \"CLOCK_PROCESS_CPUTIME_ID, every thread\",\n");
    }
    std::printf("  \"results\": [");
    for (std::size_t i = 0; i < results.size(); ++i) {
        const size_result& r = results[i];
        std::printf("%s\n    {\"bytes\": %zu, \"iterations\": %" PRIu64, i ? "," : "", r.bytes, r.iterations);
        if (cfg.test == test_type::latency) {
            std::printf(", \"latency_us\": %s, \"full_round_trip_us\": %s}", json_latency(r.reported).c_str(),
                        json_latency(r.full).c_str());
        } else {
            std::printf(", \"seconds\": %.6f, \"mb_per_s\": %.3f, \"mmsg_per_s\": %.6f, \"cpu_us_per_op\": %.4f, "
                        "\"cpu_utilization\": %.3f, \"listener_sleeps\": %" PRIu64 "}",
                        r.seconds, r.mb_per_s, r.mmsg_per_s, r.cpu_us_per_op, r.cpu_utilization, r.sleeps);
        }
    }
    std::printf("\n  ]\n}\n");
}

void print_header(const config& cfg, const std::string& device) {
    std::printf("cordma-perf %s: RDMA %s %s, %s on %s\n", CORDMA_VERSION, to_string(cfg.op), to_string(cfg.test),
                cfg.mode.c_str(), device.c_str());
    std::printf("  %u QP%s, %u outstanding, QP depth %u, %s polling, %" PRIu64 " iterations after %" PRIu64
                " warm-up\n",
                cfg.qps, cfg.qps == 1 ? "" : "s", cfg.depth, cfg.qp_depth, cordma::to_string(cfg.polling),
                cfg.iterations, *cfg.warmup);
    if (cfg.test == test_type::latency) {
        std::printf("  latency: %s round trip: %s\n", latency_basis(cfg), latency_derivation(cfg).c_str());
        std::printf(" %8s %11s %9s %9s %9s %10s %9s %9s   [usec, %s round trip]\n", "#bytes", "#iterations", "t_min",
                    "p50", "p99", "p99.9", "t_max", "t_avg", latency_basis(cfg));
    } else {
        std::printf("  MB = 2^20 bytes (as perftest); CPU = process CPU time, every thread, per operation\n");
        std::printf(" %8s %11s %12s %12s %12s %8s\n", "#bytes", "#iterations", "BW[MB/sec]", "MsgRate[Mpps]",
                    "CPU[us/op]", "CPU[%]");
    }
    std::fflush(stdout);
}

void print_row(const config& cfg, const size_result& r) {
    if (cfg.test == test_type::latency) {
        const latency_stats& s = r.reported;
        std::printf(" %8zu %11" PRIu64 " %9.2f %9.2f %9.2f %10.2f %9.2f %9.2f\n", r.bytes, r.iterations, s.min, s.p50,
                    s.p99, s.p99_9, s.max, s.avg);
    } else {
        std::printf(" %8zu %11" PRIu64 " %12.2f %12.6f %12.3f %8.1f\n", r.bytes, r.iterations, r.mb_per_s,
                    r.mmsg_per_s, r.cpu_us_per_op, r.cpu_utilization * 100);
    }
    std::fflush(stdout);
}

std::string human_size(std::size_t bytes) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        return std::to_string(bytes >> 20) + " MiB";
    if (bytes >= 1024 && bytes % 1024 == 0)
        return std::to_string(bytes >> 10) + " KiB";
    return std::to_string(bytes) + " B";
}

// ---------------------------------------------------------------------------
// The run

task<std::vector<size_result>> run_all(std::shared_ptr<event_listener> listener, std::vector<qp_pair>& pairs,
                                       const config& cfg, std::string device) {
    // From here on every coroutine lives on the listener thread.
    co_await listener->schedule();

    std::vector<size_result> results;
    std::vector<std::uint64_t> samples;
    const bool progress = !cfg.quiet && cfg.sizes.size() > 1;
    const bool human = !cfg.json;
    if (human)
        print_header(cfg, device);
    for (std::size_t i = 0; i < cfg.sizes.size(); ++i) {
        std::size_t size = cfg.sizes[i];
        if (progress)
            std::fprintf(stderr, "cordma-perf: [%zu/%zu] %s %s, %s ...\n", i + 1, cfg.sizes.size(), to_string(cfg.op),
                         to_string(cfg.test), human_size(size).c_str());
        if (*cfg.warmup > 0)
            (void)co_await run_phase(pairs, cfg, *listener, size, std::max<std::uint64_t>(*cfg.warmup, cfg.qps),
                                     nullptr);
        size_result r;
        r.bytes = size;
        r.iterations = cfg.iterations;
        if (cfg.test == test_type::latency) {
            samples.clear();
            samples.reserve(cfg.iterations);  // no allocation while measuring
            phase_result p = co_await run_phase(pairs, cfg, *listener, size, cfg.iterations, &samples);
            std::vector<std::uint64_t> copy = samples;
            r.full = summarize(copy, p.ns_per_tick, 1.0);
            r.reported = summarize(samples, p.ns_per_tick, std::string_view(latency_basis(cfg)) == "half" ? 2.0 : 1.0);
        } else {
            phase_result p = co_await run_phase(pairs, cfg, *listener, size, cfg.iterations, nullptr);
            r.seconds = p.seconds;
            double ops = static_cast<double>(cfg.iterations);
            r.mb_per_s = ops * static_cast<double>(size) / p.seconds / 1048576.0;
            r.mmsg_per_s = ops / p.seconds / 1e6;
            r.cpu_us_per_op = p.cpu_seconds / ops * 1e6;
            r.cpu_utilization = p.cpu_seconds / p.seconds;
            r.sleeps = p.sleeps;
        }
        if (human)
            print_row(cfg, r);
        results.push_back(r);
    }
    co_return results;
}

std::vector<qp_pair> connect_pairs(const std::shared_ptr<event_listener>& listener, const config& cfg) {
    const ibv_device_attr& attributes = listener->device()->attributes();
    if (cfg.qp_depth > static_cast<unsigned>(attributes.max_qp_wr))
        throw usage_error("--qp-depth " + std::to_string(cfg.qp_depth) + " is more than " +
                          listener->device()->name() + " allows (max_qp_wr " + std::to_string(attributes.max_qp_wr) +
                          ")");
    std::size_t largest = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
    qp_capacity capacity;
    capacity.max_send_wr = cfg.qp_depth;
    capacity.max_recv_wr = cfg.qp_depth;
    std::vector<qp_pair> pairs(cfg.qps);
    for (qp_pair& p : pairs) {
        auto [client, server] = connect_loopback(listener, capacity);
        p.client = client;
        p.server = server;
        // connect_loopback gives each pair its own protection domain.
        p.pool = memory_pool::create(p.client.qp()->pd());
        p.client_buffer = p.pool->allocate(std::max<std::size_t>(largest, 8), 4096);
        p.server_buffer = p.pool->allocate(std::max<std::size_t>(largest, 8), 4096);
        std::memset(p.client_buffer.data(), 'c', p.client_buffer.size());
        std::memset(p.server_buffer.data(), 's', p.server_buffer.size());
    }
    return pairs;
}

}  // namespace

int main(int argc, char** argv) {
    config cfg;
    try {
        auto parsed = parse_arguments(argc, argv);
        if (!parsed)
            return 0;
        cfg = std::move(*parsed);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "cordma-perf: %s\n(cordma-perf --help lists the options)\n", e.what());
        return 2;
    }

    try {
        auto device = device_context::open(cfg.device);
        auto listener = event_listener::start(device, {.mode = cfg.polling});
        std::vector<qp_pair> pairs = connect_pairs(listener, cfg);
        auto results = sync_wait(run_all(listener, pairs, cfg, device->name()));
        if (cfg.json)
            print_json(cfg, device->name(), results);
        // The connections must go before the listener's last user reference;
        // the listener's thread is joined when `listener` goes.
        pairs.clear();
        return 0;
    } catch (const usage_error& e) {
        std::fprintf(stderr, "cordma-perf: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma-perf: %s\n", e.what());
        return 1;
    }
}
