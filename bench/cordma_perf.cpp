// cordma-perf: latency and bandwidth of RDMA operations through cordma's
// public API, run the way perftest's ib_*_lat and ib_*_bw are, so the two
// can be run with matching parameters and compared:
//
//     server:  cordma-perf [options]          listens (builder::listen), prints
//                                             "listening on IP:PORT", serves one client
//     client:  cordma-perf [options] HOST     connects (builder::connect) to HOST[:PORT]
//     one process: cordma-perf --loopback [options]
//                                             two connections joined by connect_loopback
//                                             on one event listener (the older mode)
//
// Across processes each side has its own builder and so its own event
// listener thread; everything of a side runs inside one sync_wait on that
// thread (the top coroutine's first step is co_await listener->schedule()),
// so each operation is posted and resumed on the thread that polls its
// completion: no thread hop, no allocation per operation.
//
// The client sends its plan (op, test, sizes, iterations, QPs, depth) to the
// server over a control connection (send/recv, one request and one answer at
// a time, each answer's receive posted before its request goes), and the
// server takes it: as with perftest, give both sides the same options, but
// the client's win (the server prints a note when they differ). The data
// connections are opened next (connection::new_connection, -q of them); on
// each, both sides grant their buffer to the other through the agent
// (send_local_mr / receive_remote_mr) and so learn where to write. Every
// phase (the warm-up and the measurement of each size) starts with a
// "phase" request the server answers once its receives are posted and its
// answering coroutines run: no message ever finds an empty receive queue.
//
// Latency, measured as perftest measures it (samples are client round
// trips, timed with the TSC like perftest's get_cycles):
//   write      ib_write_lat's ping-pong: the client writes `size` bytes into
//              the server's buffer, the server polls the last byte of its
//              buffer until it changes, then writes back into the client's,
//              whose last byte the client polls. Reported RTT/2.
//   send       ib_send_lat's: the client sends, the server's posted receive
//              completes, the server sends back. Reported RTT/2.
//   write_imm  the same ping-pong with write-with-immediate both ways, each
//              side woken by its recv_imm. Reported RTT/2.
//   read,      post to completion, reported whole, as ib_read_lat and
//   fetch_add  ib_atomic_lat do.
// One difference from perftest: a cordma operation resumes its coroutine at
// its completion, so each side awaits its own write's (or send's) ACK before
// it polls for the answer; the ACK is back before the answer can be, so what
// this adds is the completion's handling, which is cordma's cost to report.
// Polling for the answer spins on the listener thread, as perftest spins
// (so with -q above 1, write ping-pongs take turns: while one spins, the
// others' completions wait; -q > 1 is for send and write_imm ping-pongs).
// In --loopback mode `write` latency is instead one write from post to its
// completion, halved (both ends share one thread, so neither can spin).
//
// Idle (--idle SECONDS, across processes only): the control connection
// and -q data connections are opened and their buffers exchanged, then
// both sides do nothing for SECONDS (the client waits on an io_uring
// timeout, the server on the receive of the client's next request), each
// listener left to its --polling mode. Each side reports its process CPU
// time over its window as % of one core, and how often its listener went
// to sleep; the client prints both sides' figures.
//
// Bandwidth (--test bw, like ib_*_bw): -t operations in flight on the
// client (coroutines, each looping on co_await), spread over -q QPs; the
// server is passive but for send and write_imm, where it keeps -r receives
// posted per QP. MB/s of 2^20 bytes (perftest's), million messages per
// second, and the client's process CPU time per operation.
//
// Option letters follow perftest where the meaning is the same:
//   perftest              cordma-perf
//   -s, --size            -s, --size        (also a comma list, K/M suffixes)
//   -a, --all             -a, --all         2 B to 1 MiB (perftest: to 8 MiB)
//   -n, --iters           -n, --iters
//   -p, --port            -p, --port        rdma_cm port (default 18515, perftest's)
//   -d, --ib-dev          -d, --ib-dev
//   -i, --ib-port         -i, --ib-port
//   -x, --gid-index       -x, --gid-index
//   -m, --mtu             -m, --mtu         path MTU cap (builder::path_mtu)
//   -t, --tx-depth        -t, --tx-depth    operations in flight (bw; lat: 1 per QP)
//   -r, --rx-depth        -r, --rx-depth    receives kept posted per QP (send bw)
//   -q, --qp              -q, --qp          QPs (connections)
//   -u, --qp-timeout      -u, --qp-timeout  ACK timeout code (builder::timeout)
//   -e, --events          -e, --events      = --polling event (default busy, as perftest spins;
//                                           a server of one-sided bw sleeps, as perftest's)
//   -R, --rdma_cm         -R, --rdma_cm     accepted: rdma_cm is cordma's default
//                                           (--exchange tcp: the TCP exchange)
//   -F, --CPU-freq        -F, --CPU-freq    accepted, no effect: ticks are calibrated
//                                           against steady_clock every phase
//   -V, --version         -V, --version
//   -h, --help            -h, --help
// Not yet (refused with a message): -l/--post_list, -Q/--cq-mod, -I/--inline_size
// (issue 15: batched doorbells, selective signalling, inline data), -D/--duration.
// perftest's test is its program (ib_write_lat, ib_send_bw, ...); here it is
// --op (write, read, send, write_imm, fetch_add) and --test (lat, bw), and
// there are options of cordma's own: --polling, --qp-depth, --warmup,
// --bind, --exchange, --full, --idle, --json, --quiet, --loopback.

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

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/remote_mr.hpp>
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

constexpr const char* default_port = "18515";  // perftest's

struct config {
    std::string mode;             // loopback, server or client
    std::string host;             // client: the server, HOST or HOST:PORT
    std::string port = default_port;
    std::string bind = "0.0.0.0"; // server: the address to listen on
    op_type op = op_type::write;
    test_type test = test_type::latency;
    std::vector<std::size_t> sizes;  // empty: the default for the op
    bool sweep = false;
    std::uint64_t iterations = 0;    // 0: the default for the test
    std::optional<std::uint64_t> warmup;
    unsigned depth = 0;              // 0: the default for the test
    unsigned qp_depth = 128;
    unsigned rx_depth = 0;           // 0: qp_depth
    unsigned qps = 1;
    polling_mode polling = polling_mode::busy;
    std::string device;
    int ib_port = 0;                 // 0: the builder's choice
    int gid_index = -1;
    std::optional<ibv_mtu> mtu;
    std::optional<std::uint8_t> qp_timeout;
    endpoint_exchange exchange = endpoint_exchange::rdma_cm;
    bool full_round_trip = false;
    std::uint64_t idle_seconds = 0;  // --idle: connections open, no traffic, CPU time measured (0: off)
    bool json = false;
    bool quiet = false;
    std::string metrics;  // "", "prometheus" or "json": print the counters after the run
    bool measurement_given = false;  // any of the options the client's plan carries
    bool polling_given = false;
};

bool remote(const config& cfg) { return cfg.mode != "loopback"; }

class usage_error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

constexpr const char* usage_text = R"(usage: cordma-perf [options]              server: listen, serve one client
       cordma-perf [options] HOST[:PORT]  client: connect to a cordma-perf server
       cordma-perf --loopback [options]   both ends in this process (connect_loopback)

Measures the latency or bandwidth of one RDMA operation through cordma, like
perftest's ib_write_lat / ib_send_lat / ib_write_bw and friends, run the same
way: the server first, then the client with the server's address. The client
sends its plan to the server; give both the same options (the client's win).

What to measure:
      --op OP              write (default), read, send (send/recv),
                           write_imm (write with immediate), fetch_add
      --test TEST          lat|latency (default) or bw|bandwidth
  -s, --size BYTES         message size; K and M suffixes (64, 4K, 1M); a
                           comma list runs each (8,64,4K). Default 64
                           (fetch_add: 8, the only size it has)
  -a, --all                sweep sizes 2 B to 1 MiB in powers of two
  -n, --iters N            measured operations per size (default: latency
                           1000, bandwidth 5000)
      --warmup N           operations before measuring (default: n/10,
                           at most 1000)
  -t, --tx-depth N         operations in flight = concurrent coroutines
                           (default: latency 1 per QP, bandwidth 64)
  -q, --qp N               QPs (connections); the coroutines are spread over
                           them (default 1)
      --full               latency: report full round trips for every op
                           (default: as perftest does, see below)
      --idle SECONDS       no operations: with -q connections open, both
                           sides idle for SECONDS; each reports its process
                           CPU time over the window as % of one core (what
                           the polling mode costs when nothing happens)
Where and how:
  -p, --port PORT          rdma_cm port to listen on / connect to (18515)
      --bind ADDR          server: the address to listen on (default 0.0.0.0;
                           give the device's address so that the readiness
                           line names it)
  -d, --ib-dev NAME        RDMA device (default: the first with an active port)
  -i, --ib-port N          port on the device (default: the first active one)
  -x, --gid-index N        GID index (default: the RoCE v2 GID of the address)
  -m, --mtu BYTES          path MTU cap: 256, 512, 1024, 2048 or 4096
  -u, --qp-timeout CODE    ACK timeout, 4.096 us * 2^CODE (default 14)
  -r, --rx-depth N         receives kept posted per QP for send and write_imm
                           bandwidth (default 512, as ib_send_bw; --loopback:
                           --qp-depth)
      --qp-depth N         send and receive queue entries per QP (default 128)
      --polling MODE       busy (default, like perftest), adaptive or event;
                           a server given --test bw with write, read or
                           fetch_add defaults to event: it has nothing to
                           poll (perftest's sleeps in its socket)
  -e, --events             --polling event (perftest's -e)
      --exchange HOW       rdma_cm (default) or tcp: how the QPs are joined
  -R, --rdma_cm            accepted: rdma_cm is the default exchange
  -F, --CPU-freq           accepted, no effect (the tick rate is calibrated)
      --loopback           both ends in this process (one listener thread)
      --json               print one JSON document instead of tables
      --quiet              no progress lines on stderr during sweeps
      --metrics FORMAT     after the run, print what this side's connections
                           counted (metrics.hpp): prometheus or json
  -V, --version            the version
  -h, --help               this text
Not yet: -l/--post_list, -Q/--cq-mod, -I/--inline_size, -D/--duration.

Latency is reported the way perftest's ib_*_lat report it:
  write      half round trip of ib_write_lat's ping-pong: each side writes
             into the other's buffer and polls the last byte of its own for
             the answer (--loopback: one write from post to completion, halved)
  send,      half round trip of a ping-pong, each side answering the other's
  write_imm  message when its receive completes, as ib_send_lat does
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

ibv_mtu parse_mtu(std::string_view option, std::string_view text) {
    switch (parse_number(option, text, 256, 4096)) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: break;
    }
    throw usage_error(std::string(option) + ": '" + std::string(text) + "' is not an MTU (256, 512, 1024, 2048, 4096)");
}

/// Parses argv; returns nullopt after printing --help or --version.
std::optional<config> parse_arguments(int argc, const char* const* argv) {
    config cfg;
    bool size_given = false;
    bool loopback = false;
    std::string old_mode;
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
        auto measured = [&] { cfg.measurement_given = true; };
        if (name == "-h" || name == "--help") {
            std::fputs(usage_text, stdout);
            return std::nullopt;
        } else if (name == "-V" || name == "--version") {
            std::printf("cordma-perf %s\n", CORDMA_VERSION);
            return std::nullopt;
        } else if (name == "--loopback") {
            flag();
            loopback = true;
        } else if (name == "--mode") {
            old_mode = value();
        } else if (name == "--op") {
            measured();
            cfg.op = parse_op(value());
        } else if (name == "--test") {
            measured();
            cfg.test = parse_test(value());
        } else if (name == "-s" || name == "--size") {
            measured();
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
            measured();
            cfg.sweep = true;
        } else if (name == "-n" || name == "--iters" || name == "--iterations") {
            measured();
            cfg.iterations = parse_number(name, value(), 1, 1'000'000'000);
        } else if (name == "--warmup") {
            measured();
            cfg.warmup = parse_number(name, value(), 0, 1'000'000'000);
        } else if (name == "-t" || name == "--tx-depth" || name == "--depth") {
            measured();
            cfg.depth = static_cast<unsigned>(parse_number(name, value(), 1, 65536));
        } else if (name == "-q" || name == "--qp" || name == "--qps") {
            measured();
            cfg.qps = static_cast<unsigned>(parse_number(name, value(), 1, 1024));
        } else if (name == "--full") {
            flag();
            measured();
            cfg.full_round_trip = true;
        } else if (name == "--idle") {
            measured();
            cfg.idle_seconds = parse_number(name, value(), 1, 86400);
        } else if (name == "--qp-depth") {
            cfg.qp_depth = static_cast<unsigned>(parse_number(name, value(), 1, 1 << 20));
        } else if (name == "-r" || name == "--rx-depth") {
            cfg.rx_depth = static_cast<unsigned>(parse_number(name, value(), 1, 1 << 20));
        } else if (name == "-p" || name == "--port") {
            cfg.port = std::to_string(parse_number(name, value(), 0, 65535));
        } else if (name == "--bind") {
            cfg.bind = value();
        } else if (name == "--polling") {
            cfg.polling = parse_polling(value());
            cfg.polling_given = true;
        } else if (name == "-e" || name == "--events") {
            flag();
            cfg.polling = polling_mode::event;
            cfg.polling_given = true;
        } else if (name == "-d" || name == "--ib-dev" || name == "--device") {
            cfg.device = value();
        } else if (name == "-i" || name == "--ib-port") {
            cfg.ib_port = static_cast<int>(parse_number(name, value(), 1, 255));
        } else if (name == "-x" || name == "--gid-index") {
            cfg.gid_index = static_cast<int>(parse_number(name, value(), 0, 65535));
        } else if (name == "-m" || name == "--mtu") {
            cfg.mtu = parse_mtu(name, value());
        } else if (name == "-u" || name == "--qp-timeout") {
            cfg.qp_timeout = static_cast<std::uint8_t>(parse_number(name, value(), 0, 31));
        } else if (name == "--exchange") {
            std::string_view how = value();
            if (how == "rdma_cm")
                cfg.exchange = endpoint_exchange::rdma_cm;
            else if (how == "tcp")
                cfg.exchange = endpoint_exchange::tcp;
            else
                throw usage_error("--exchange: '" + std::string(how) + "' is not rdma_cm or tcp");
        } else if (name == "-R" || name == "--rdma_cm") {
            flag();
            cfg.exchange = endpoint_exchange::rdma_cm;
        } else if (name == "-F" || name == "--CPU-freq") {
            flag();
        } else if (name == "-l" || name == "--post_list" || name == "-Q" || name == "--cq-mod" || name == "-I" ||
                   name == "--inline_size") {
            throw usage_error(std::string(name) +
                              ": not yet: cordma posts one work request per operation, signals each and posts "
                              "no inline data today (issue 15 plans all three)");
        } else if (name == "-D" || name == "--duration") {
            throw usage_error(std::string(name) + ": not supported: give -n iterations");
        } else if (name == "--json") {
            flag();
            cfg.json = true;
        } else if (name == "--quiet") {
            flag();
            cfg.quiet = true;
        } else if (name == "--metrics") {
            cfg.metrics = value();
            if (cfg.metrics != "prometheus" && cfg.metrics != "json")
                throw usage_error("--metrics is prometheus or json, not '" + cfg.metrics + "'");
        } else if (!arg.starts_with("-") && !arg.empty()) {
            if (!cfg.host.empty())
                throw usage_error("one HOST only (got '" + cfg.host + "' and '" + std::string(arg) + "')");
            cfg.host = arg;
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }

    if (!old_mode.empty() && old_mode != "loopback")
        throw usage_error("--mode " + old_mode + ": there is no --mode any more: the server is cordma-perf without "
                          "a HOST, the client cordma-perf HOST (as perftest); --loopback for one process");
    loopback = loopback || !old_mode.empty();
    if (loopback && !cfg.host.empty())
        throw usage_error("--loopback runs both ends here: it takes no HOST");
    cfg.mode = loopback ? "loopback" : cfg.host.empty() ? "server" : "client";
    if (cfg.idle_seconds != 0 && loopback)
        throw usage_error("--idle measures a server and a client each idle in its own process: drop --loopback");
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
        throw usage_error("--tx-depth " + std::to_string(cfg.depth) + " is less than --qp " +
                          std::to_string(cfg.qps) + ": every QP needs at least one coroutine");
    const bool ping_pong = is_ping_pong(cfg.op) || (remote(cfg) && cfg.op == op_type::write);
    if (cfg.test == test_type::latency && ping_pong && cfg.depth != cfg.qps)
        throw usage_error(std::string("--test lat --op ") + to_string(cfg.op) +
                          " is a ping-pong with one message in flight per QP: --tx-depth must equal --qp "
                          "(use --qp for concurrent ping-pongs)");
    if (cfg.iterations < cfg.qps)
        throw usage_error("--iters " + std::to_string(cfg.iterations) + " is less than --qp " +
                          std::to_string(cfg.qps));
    // perftest's ib_send_bw keeps 512 receives posted: a server that is
    // descheduled for a few milliseconds must not let the queue run dry.
    // In loopback mode both ends are one thread: the queue depth, as before.
    if (cfg.rx_depth == 0)
        cfg.rx_depth = remote(cfg) ? 512 : cfg.qp_depth;
    if (!remote(cfg) && cfg.rx_depth > cfg.qp_depth)
        throw usage_error("--rx-depth " + std::to_string(cfg.rx_depth) + " is more than --qp-depth " +
                          std::to_string(cfg.qp_depth));
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

// Idle (--idle): connections open, no traffic, each side's CPU time over
// a window of so many seconds. What a polling mode costs while nothing
// happens: event should cost nothing, adaptive spin only after activity.

/// Where a side's idle window starts.
struct idle_mark {
    clock_type::time_point wall{};
    double cpu = 0;
    std::uint64_t sleeps = 0;
};

/// One side's figures over its idle window.
struct idle_figures {
    std::string side;
    std::string polling;
    double seconds = 0;
    double cpu_seconds = 0;
    std::uint64_t sleeps = 0;
    double core_percent() const { return seconds > 0 ? cpu_seconds / seconds * 100.0 : 0.0; }
};

idle_mark start_idle(const event_listener& el) { return {clock_type::now(), process_cpu_seconds(), el.sleeps()}; }

idle_figures end_idle(const idle_mark& m, const event_listener& el, std::string side) {
    idle_figures f;
    f.side = std::move(side);
    f.polling = cordma::to_string(el.options().mode);
    f.cpu_seconds = process_cpu_seconds() - m.cpu;
    f.seconds = static_cast<double>(nanoseconds_between(m.wall, clock_type::now())) * 1e-9;
    f.sleeps = el.sleeps() - m.sleeps;
    return f;
}

/// `co_await pause(el, d)`: resumes on the listener thread once `d` has
/// passed (event_listener::call_after, an io_uring timeout), leaving the
/// listener to its polling mode meanwhile. Listener thread only.
struct pause {
    event_listener* el;
    std::chrono::nanoseconds delay;
    std::shared_ptr<event_listener::timer> timer;
    bool await_ready() const noexcept { return delay.count() <= 0; }
    void await_suspend(std::coroutine_handle<> h) { timer = el->call_after(delay, [h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

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
unsigned receivers_per_side(const config& cfg, bool ping_pong) { return ping_pong ? 2u : cfg.rx_depth; }

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
        if (remote(cfg))
            what = "each sample is a ping-pong round trip as ib_write_lat's: the client's RDMA write into the "
                   "server's buffer until the server's answering write lands in the client's (each side polls "
                   "the last byte of its buffer)";
        else
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

const char* perftest_title(const config& cfg) {
    if (cfg.idle_seconds != 0)
        return "Idle Test (connections open, no traffic)";
    switch (cfg.op) {
    case op_type::write: return cfg.test == test_type::latency ? "RDMA_Write Latency Test" : "RDMA_Write BW Test";
    case op_type::read: return cfg.test == test_type::latency ? "RDMA_Read Latency Test" : "RDMA_Read BW Test";
    case op_type::send: return cfg.test == test_type::latency ? "Send Latency Test" : "Send BW Test";
    case op_type::write_imm:
        return cfg.test == test_type::latency ? "RDMA_Write_imm Latency Test" : "RDMA_Write_imm BW Test";
    case op_type::fetch_add:
        return cfg.test == test_type::latency ? "Atomic FETCH_AND_ADD Latency Test" : "Atomic FETCH_AND_ADD BW Test";
    }
    return "?";
}

constexpr const char* rule =
    "---------------------------------------------------------------------------------------\n";

/// perftest's banner, then the column headings. `peer`: the other side
/// (client and server), empty in loopback mode.
void print_header(const config& cfg, const std::string& device, const std::string& peer = {}) {
    std::printf("%s", rule);
    std::printf("                    %s (cordma-perf %s)\n", perftest_title(cfg), CORDMA_VERSION);
    std::printf(" Mode            : %-14s Device         : %s\n", cfg.mode.c_str(), device.c_str());
    std::printf(" Number of qps   : %-14u Transport type : IB (RC, cordma connection)\n", cfg.qps);
    if (cfg.idle_seconds == 0)
        std::printf(" TX depth        : %-14u QP depth       : %u\n", cfg.depth, cfg.qp_depth);
    std::printf(" Polling         : %-14s Exchange       : %s\n", cordma::to_string(cfg.polling),
                cfg.exchange == endpoint_exchange::tcp ? "TCP" : "rdma_cm");
    if (cfg.idle_seconds == 0)
        std::printf(" Iterations      : %-14" PRIu64 " Warm-up        : %" PRIu64 "\n", cfg.iterations, *cfg.warmup);
    if (!peer.empty())
        std::printf(" Peer            : %s\n", peer.c_str());
    if (cfg.idle_seconds != 0)
        std::printf(" Idle            : %" PRIu64 " s, no operations; CPU = process CPU time, every thread, "
                    "as %% of one core\n", cfg.idle_seconds);
    else if (cfg.test == test_type::latency)
        std::printf(" Latency         : %s round trip: %s\n", latency_basis(cfg), latency_derivation(cfg).c_str());
    else
        std::printf(" MB = 2^20 bytes (as perftest); CPU = process CPU time, every thread, per operation\n");
    std::printf("%s", rule);
    if (cfg.idle_seconds != 0) {
        std::printf(" %8s %10s %10s %12s %10s %16s\n", "side", "polling", "seconds", "CPU[s]", "CPU[%]",
                    "listener sleeps");
        std::fflush(stdout);
        return;
    }
    if (cfg.mode == "server") {
        std::fflush(stdout);
        return;  // the client reports
    }
    if (cfg.test == test_type::latency) {
        std::printf(" %8s %11s %9s %9s %9s %10s %9s %9s   [usec, %s round trip]\n", "#bytes", "#iterations", "t_min",
                    "p50", "p99", "p99.9", "t_max", "t_avg", latency_basis(cfg));
    } else {
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

void print_idle_row(const idle_figures& f) {
    std::printf(" %8s %10s %10.3f %12.6f %10.3f %16" PRIu64 "\n", f.side.c_str(), f.polling.c_str(), f.seconds,
                f.cpu_seconds, f.core_percent(), f.sleeps);
    std::fflush(stdout);
}

void print_idle_json(const config& cfg, const std::string& device, const std::vector<idle_figures>& sides) {
    std::printf("{\n  \"tool\": \"cordma-perf\",\n  \"version\": \"%s\",\n", CORDMA_VERSION);
    std::printf("  \"mode\": \"%s\",\n  \"device\": \"%s\",\n", json_escape(cfg.mode).c_str(),
                json_escape(device).c_str());
    std::printf("  \"test\": \"idle\",\n  \"polling\": \"%s\",\n  \"qps\": %u,\n  \"idle_seconds\": %" PRIu64
                ",\n", cordma::to_string(cfg.polling), cfg.qps, cfg.idle_seconds);
    std::printf("  \"cpu\": \"CLOCK_PROCESS_CPUTIME_ID, every thread; core_percent = cpu_seconds / seconds * 100\",\n");
    std::printf("  \"results\": [");
    for (std::size_t i = 0; i < sides.size(); ++i) {
        const idle_figures& f = sides[i];
        std::printf("%s\n    {\"side\": \"%s\", \"polling\": \"%s\", \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
                    "\"core_percent\": %.4f, \"listener_sleeps\": %" PRIu64 "}",
                    i ? "," : "", f.side.c_str(), json_escape(f.polling).c_str(), f.seconds, f.cpu_seconds,
                    f.core_percent(), f.sleeps);
    }
    std::printf("\n  ]\n}\n");
}

std::string human_size(std::size_t bytes) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        return std::to_string(bytes >> 20) + " MiB";
    if (bytes >= 1024 && bytes % 1024 == 0)
        return std::to_string(bytes >> 10) + " KiB";
    return std::to_string(bytes) + " B";
}

/// One size's figures from its measured phase.
size_result make_result(const config& cfg, std::size_t size, const phase_result& p,
                        std::vector<std::uint64_t>& samples) {
    size_result r;
    r.bytes = size;
    r.iterations = cfg.iterations;
    if (cfg.test == test_type::latency) {
        std::vector<std::uint64_t> copy = samples;
        r.full = summarize(copy, p.ns_per_tick, 1.0);
        r.reported = summarize(samples, p.ns_per_tick, std::string_view(latency_basis(cfg)) == "half" ? 2.0 : 1.0);
    } else {
        r.seconds = p.seconds;
        double ops = static_cast<double>(cfg.iterations);
        r.mb_per_s = ops * static_cast<double>(size) / p.seconds / 1048576.0;
        r.mmsg_per_s = ops / p.seconds / 1e6;
        r.cpu_us_per_op = p.cpu_seconds / ops * 1e6;
        r.cpu_utilization = p.cpu_seconds / p.seconds;
        r.sleeps = p.sleeps;
    }
    return r;
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
        samples.clear();
        if (cfg.test == test_type::latency)
            samples.reserve(cfg.iterations);  // no allocation while measuring
        phase_result p = co_await run_phase(pairs, cfg, *listener, size, cfg.iterations,
                                            cfg.test == test_type::latency ? &samples : nullptr);
        size_result r = make_result(cfg, size, p, samples);
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
        // As the network mode's builder (and perftest): a send that finds
        // no receive is retried after 0.64 ms, not the default 655 ms.
        qp_connect_options options;
        options.min_rnr_timer = 12;
        auto [client, server] = connect_loopback(listener, capacity, options);
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

// ---------------------------------------------------------------------------
// Across processes: server and client

/// How long a side spins for the peer's answer before it gives up (the
/// peer is gone: a write ping-pong has no completion to fail).
constexpr std::chrono::seconds no_progress_limit{30};
/// The lease of the buffers each side grants the other: the whole run.
constexpr std::chrono::milliseconds grant_lease = std::chrono::hours(24);
constexpr std::size_t control_bytes = 4096;

/// Latency tests that are a ping-pong across processes.
bool remote_ping_pong(const config& cfg) {
    return cfg.test == test_type::latency && (cfg.op == op_type::write || is_ping_pong(cfg.op));
}

/// One data connection and its buffer: the first `stride` bytes are what
/// this side sends or writes from, the next `stride` where the peer's
/// writes land (the peer's buffer is laid out alike, so `target` is the
/// second half of the peer's).
struct link {
    connection conn;
    local_mr buffer;
    std::size_t stride = 0;
    remote_mr peer;

    // Per phase.
    op_counter ops;
    op_counter receives;
    arrival_signal arrivals;

    local_slice outgoing(std::size_t size) const { return buffer.slice(0, size); }
    local_slice incoming(std::size_t size) const { return buffer.slice(stride, size); }
    remote_slice target(std::size_t size) const { return peer.slice(stride, size); }
    /// The byte ib_write_lat polls: the last of the incoming message.
    const std::byte* poll_byte(std::size_t size) const { return buffer.data() + stride + size - 1; }
};

/// Both halves of a buffer hold the largest message, 64-byte aligned (and
/// at least 8 bytes, for fetch_add).
std::size_t stride_for(const config& cfg) {
    std::size_t largest = std::max<std::size_t>(*std::max_element(cfg.sizes.begin(), cfg.sizes.end()), 8);
    return (largest + 63) / 64 * 64;
}

/// Spins until the byte at `p` reads `want`, as ib_write_lat polls its
/// buffer. Throws if it has not after no_progress_limit: the peer is gone.
void spin_until(const std::byte* p, std::uint8_t want) {
    const auto* byte = reinterpret_cast<const std::uint8_t*>(p);
    std::uint32_t spins = 0;
    clock_type::time_point deadline{};
    while (__atomic_load_n(byte, __ATOMIC_ACQUIRE) != want) {
        if ((++spins & 0xfffff) == 0) {
            auto now = clock_type::now();
            if (deadline == clock_type::time_point{})
                deadline = now + no_progress_limit;
            else if (now > deadline)
                throw std::runtime_error("no answer from the peer for " + std::to_string(no_progress_limit.count()) +
                                         " s (is it still running?)");
        }
    }
}

/// The client's half of ib_write_lat's ping-pong.
task<void> write_pinger(link* l, std::size_t size, std::uint64_t count, std::vector<std::uint64_t>* samples) {
    local_slice local = l->outgoing(size);
    remote_slice remote = l->target(size);
    std::byte* mark = local.data() + size - 1;
    const std::byte* poll = l->poll_byte(size);
    for (std::uint64_t i = 1; i <= count; ++i) {
        std::uint64_t start = ticks();
        *mark = static_cast<std::byte>(i);
        co_await l->conn.write(local, remote);
        spin_until(poll, static_cast<std::uint8_t>(i));
        if (samples != nullptr)
            samples->push_back(ticks() - start);
    }
}

/// The server's half: answer each write once its last byte has landed.
/// Starts by going through the listener's queue, so that whoever spawned it
/// can post its "go" first: from then on it spins on this thread.
task<void> write_ponger(link* l, std::size_t size, std::uint64_t count, event_listener* listener) {
    co_await listener->schedule();
    local_slice local = l->outgoing(size);
    remote_slice remote = l->target(size);
    std::byte* mark = local.data() + size - 1;
    const std::byte* poll = l->poll_byte(size);
    for (std::uint64_t i = 1; i <= count; ++i) {
        spin_until(poll, static_cast<std::uint8_t>(i));
        *mark = static_cast<std::byte>(i);
        co_await l->conn.write(local, remote);
    }
}

/// The client's half of a send (or write_imm) ping-pong: send, wait until
/// a receive completes with the answer, repeat.
template <op_type Op>
task<void> asker(link* l, std::size_t size, std::uint64_t count, std::vector<std::uint64_t>* samples) {
    local_slice local = l->outgoing(size);
    remote_slice remote = l->target(size);
    for (std::uint64_t i = 0; i < count; ++i) {
        std::uint64_t start = ticks();
        co_await start_op<Op>(l->conn, local, remote);
        co_await l->arrivals.wait();
        if (samples != nullptr)
            samples->push_back(ticks() - start);
    }
}

/// The server's half: answer each message as soon as its receive completes.
template <op_type Op>
task<void> answerer(link* l, std::size_t size, std::uint64_t count) {
    local_slice local = l->outgoing(size);
    remote_slice remote = l->target(size);
    for (std::uint64_t i = 0; i < count; ++i) {
        co_await l->arrivals.wait();
        co_await start_op<Op>(l->conn, local, remote);
    }
}

/// Client, one-sided (and bandwidth): operations until the link's share
/// runs out.
template <op_type Op>
task<void> remote_worker(link* l, std::size_t size, std::vector<std::uint64_t>* samples) {
    local_slice local = l->outgoing(size);
    remote_slice remote = l->target(size);
    while (l->ops.claim()) {
        std::uint64_t start = ticks();
        (void)co_await start_op<Op>(l->conn, local, remote);
        if (samples != nullptr)
            samples->push_back(ticks() - start);
    }
}

/// Keeps receives posted on a link (as receiver<Op>, for link's fields).
template <op_type Op>
task<void> link_receiver(link* l, std::size_t size) {
    local_slice into = l->incoming(size);
    while (l->receives.claim()) {
        if constexpr (Op == op_type::send)
            (void)co_await l->conn.recv(into);
        else
            (void)co_await l->conn.recv_imm();
        l->arrivals.notify();
    }
}

/// Sets every link up for a phase of `count` operations of `size` bytes:
/// each link's share, a clean incoming half, and (spawned into `group`)
/// the receives this side keeps posted. Both sides share the counts out
/// alike.
void prepare_links(std::vector<std::unique_ptr<link>>& links, const config& cfg, std::size_t size,
                   std::uint64_t count, bool client, task_group& group) {
    const auto qps = static_cast<std::uint64_t>(links.size());
    const bool ping_pong = remote_ping_pong(cfg);
    const bool receives = needs_receives(cfg.op) && (ping_pong || !client);
    for (std::uint64_t k = 0; k < qps; ++k) {
        link& l = *links[k];
        std::uint64_t share = count / qps + (k < count % qps ? 1 : 0);
        l.ops = {share, 0};
        l.receives = {receives ? share : 0, 0};
        l.arrivals = arrival_signal{};
        std::memset(l.buffer.data() + l.stride, 0, size);
        if (!receives)
            continue;
        for (unsigned r = 0; r < receivers_per_side(cfg, ping_pong); ++r) {
            if (cfg.op == op_type::send)
                group.spawn(link_receiver<op_type::send>(&l, size));
            else
                group.spawn(link_receiver<op_type::write_imm>(&l, size));
        }
    }
}

// The control connection: text requests from the client, one answer each.

struct control {
    connection conn;
    local_mr out;
    local_mr in;
};

task<void> receive_text(connection* conn, local_slice into, std::string* text) {
    recv_result got = co_await conn->recv(into);
    text->assign(reinterpret_cast<const char*>(into.data()), got.length);
}

task<void> send_text(connection* conn, local_slice from, std::string text) {
    if (text.empty() || text.size() > from.size())
        throw std::length_error("cordma-perf: a control message of " + std::to_string(text.size()) + " bytes");
    std::memcpy(from.data(), text.data(), text.size());
    co_await conn->send(from.slice(0, text.size()));
}

/// The client's request and the server's answer. The answer's receive is
/// posted before the request goes, so the answer never waits for it.
task<std::string> ask(control* c, std::string request) {
    std::string answer;
    task_group pending;
    pending.spawn(receive_text(&c->conn, c->in.all(), &answer));
    std::exception_ptr failed;
    try {
        co_await send_text(&c->conn, c->out.all(), std::move(request));
    } catch (...) {
        failed = std::current_exception();
        c->conn.shut_down();  // flushes the receive, so that the join below returns
    }
    try {
        co_await pending.join();
    } catch (...) {
        if (!failed)
            failed = std::current_exception();
    }
    if (failed)
        std::rethrow_exception(failed);
    if (answer.starts_with("error "))
        throw std::runtime_error("the server refused: " + answer.substr(6));
    co_return answer;
}

/// Grants the peer this side's buffer on the link and takes the peer's.
task<void> grant(connection* conn, local_slice region) {
    co_await conn->send_local_mr(region, grant_lease,
                                 access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic);
}

task<void> exchange_buffers(link* l) {
    task_group granting;
    granting.spawn(grant(&l->conn, l->buffer.all()));
    std::exception_ptr failed;
    try {
        remote_mr theirs = co_await l->conn.receive_remote_mr();
        l->peer = std::move(theirs);
    } catch (...) {
        failed = std::current_exception();
    }
    try {
        co_await granting.join();
    } catch (...) {
        if (!failed)
            failed = std::current_exception();
    }
    if (failed)
        std::rethrow_exception(failed);
    if (l->peer.size() < 2 * l->stride)
        throw std::runtime_error("the peer's buffer has " + std::to_string(l->peer.size()) + " bytes, not the " +
                                 std::to_string(2 * l->stride) + " the plan needs");
}

std::unique_ptr<link> make_link(builder& b, connection conn, std::size_t stride) {
    auto l = std::make_unique<link>();
    l->conn = std::move(conn);
    l->stride = stride;
    l->buffer = b.pool()->allocate_zeroed(2 * stride, 4096);
    std::memset(l->buffer.data(), 'x', stride);
    return l;
}

/// What the client tells the server: the options that decide what both
/// sides do, as a command line the server parses like its own.
std::string plan_text(const config& cfg) {
    std::string sizes;
    for (std::size_t s : cfg.sizes)
        sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
    std::string text = std::string("--op ") + to_string(cfg.op) + " --test " +
                       (cfg.test == test_type::latency ? "lat" : "bw") + " -s " + sizes + " -n " +
                       std::to_string(cfg.iterations) + " --warmup " + std::to_string(*cfg.warmup) + " -t " +
                       std::to_string(cfg.depth) + " -q " + std::to_string(cfg.qps);
    if (cfg.full_round_trip)
        text += " --full";
    if (cfg.idle_seconds != 0)
        text += " --idle " + std::to_string(cfg.idle_seconds);
    return text;
}

/// The server's config with the client's plan in it.
config adopt_plan(const config& mine, std::string_view plan) {
    std::vector<std::string> words{"cordma-perf"};
    while (!plan.empty()) {
        auto space = plan.find(' ');
        if (space != 0)
            words.emplace_back(plan.substr(0, space));
        plan = space == std::string_view::npos ? std::string_view{} : plan.substr(space + 1);
    }
    std::vector<const char*> argv;
    for (const auto& w : words)
        argv.push_back(w.c_str());
    std::optional<config> theirs = parse_arguments(static_cast<int>(argv.size()), argv.data());
    if (!theirs)
        throw usage_error("the client's plan asks for help");
    config cfg = mine;
    cfg.op = theirs->op;
    cfg.test = theirs->test;
    cfg.sizes = theirs->sizes;
    cfg.sweep = false;
    cfg.iterations = theirs->iterations;
    cfg.warmup = theirs->warmup;
    cfg.depth = theirs->depth;
    cfg.qps = theirs->qps;
    cfg.full_round_trip = theirs->full_round_trip;
    cfg.idle_seconds = theirs->idle_seconds;
    return cfg;
}

/// Shuts every connection down (after a failure): whatever waits on them
/// completes, so the groups can be joined.
void shut_down_all(control& ctl, std::vector<std::unique_ptr<link>>& links) {
    for (auto& l : links)
        l->conn.shut_down();
    if (ctl.conn)
        ctl.conn.shut_down();
}

task<void> close_all(control* ctl, std::vector<std::unique_ptr<link>>* links) {
    for (auto& l : *links)
        l->peer = remote_mr{};
    for (auto& l : *links)
        co_await l->conn.close();
    co_await ctl->conn.close();
}

struct server_state {
    builder b;
    listener l;
    config cfg;
    std::shared_ptr<event_listener> el;
    control ctl;
    local_mr ready;
    std::vector<std::unique_ptr<link>> links;
    std::string request;
    task_group next;   // the receive of the next request
    task_group phase;  // the current phase's coroutines
    std::uint64_t phases = 0;
    idle_mark idle;    // --idle: where this side's window started
};

/// One phase, the server's part: its receives and answering coroutines go
/// first, then the "go".
task<void> serve_phase(server_state* s, std::size_t size, std::uint64_t count) {
    const config& cfg = s->cfg;
    if (size == 0 || size > s->links.front()->stride || count < s->links.size())
        throw std::runtime_error("a phase of " + std::to_string(count) + " x " + std::to_string(size) +
                                 " B does not fit the plan");
    prepare_links(s->links, cfg, size, count, false, s->phase);
    if (remote_ping_pong(cfg)) {
        for (auto& l : s->links) {
            const std::uint64_t share = l->ops.total;
            if (cfg.op == op_type::write)
                s->phase.spawn(write_ponger(l.get(), size, share, s->el.get()));
            else if (cfg.op == op_type::send)
                s->phase.spawn(answerer<op_type::send>(l.get(), size, share));
            else
                s->phase.spawn(answerer<op_type::write_imm>(l.get(), size, share));
        }
    }
    co_await send_text(&s->ctl.conn, s->ctl.out.all(), "go");
    co_await s->phase.join();
    ++s->phases;
}

task<void> serve_plan(server_state* s, std::string plan) {
    config cfg = adopt_plan(s->cfg, plan);
    if (s->cfg.measurement_given && plan_text(cfg) != plan_text(s->cfg))
        std::printf(" note: the client's plan (%s) replaces this side's (%s)\n", plan.c_str(),
                    plan_text(s->cfg).c_str());
    s->cfg = cfg;
    co_await send_text(&s->ctl.conn, s->ctl.out.all(), "ok");
    const std::size_t stride = stride_for(s->cfg);
    for (unsigned k = 0; k < s->cfg.qps; ++k) {
        connection conn = co_await s->l.accept();
        s->links.push_back(make_link(s->b, std::move(conn), stride));
        co_await exchange_buffers(s->links.back().get());
    }
    if (!s->cfg.json)
        print_header(s->cfg, s->el->device()->name(), s->ctl.conn.peer());
}

task<void> serve_requests(server_state* s) {
    s->next.spawn(receive_text(&s->ctl.conn, s->ctl.in.all(), &s->request));
    // The client waits for this grant before its first request: by then the
    // receive above is posted.
    co_await s->ctl.conn.send_local_mr(s->ready.all(), grant_lease, access_flags::remote_read);
    bool planned = false;
    for (;;) {
        co_await s->next.join();
        std::string request = s->request;
        if (request == "done") {
            co_await send_text(&s->ctl.conn, s->ctl.out.all(), "bye");
            co_return;
        }
        s->next.spawn(receive_text(&s->ctl.conn, s->ctl.in.all(), &s->request));
        std::string error;
        try {
            if (request.starts_with("plan ") && !planned) {
                planned = true;
                co_await serve_plan(s, request.substr(5));
                continue;
            }
            // --idle: the window runs from the "go" to the client's request
            // for this side's figures; meanwhile only the next request's
            // receive is posted, and the listener is left to its mode.
            if (planned && s->cfg.idle_seconds != 0 && request == "idle") {
                s->idle = start_idle(*s->el);
                co_await send_text(&s->ctl.conn, s->ctl.out.all(), "go");
                continue;
            }
            if (planned && s->cfg.idle_seconds != 0 && request == "idle figures") {
                idle_figures f = end_idle(s->idle, *s->el, "server");
                char text[160];
                std::snprintf(text, sizeof text, "idle %.6f %.6f %" PRIu64 " %s", f.seconds, f.cpu_seconds, f.sleeps,
                              f.polling.c_str());
                if (!s->cfg.json)
                    print_idle_row(f);
                co_await send_text(&s->ctl.conn, s->ctl.out.all(), text);
                continue;
            }
            unsigned long long size = 0, count = 0;
            if (planned && std::sscanf(request.c_str(), "phase %llu %llu", &size, &count) == 2) {
                co_await serve_phase(s, size, count);
                continue;
            }
            error = "unexpected request '" + request + "'";
        } catch (const std::exception& e) {
            error = e.what();
        }
        // Tell the client why, then fail.
        co_await send_text(&s->ctl.conn, s->ctl.out.all(), ("error " + error).substr(0, control_bytes));
        throw std::runtime_error(error);
    }
}

task<void> run_server(builder b, listener l, config cfg) {
    server_state s;
    s.b = b;
    s.l = l;
    s.cfg = cfg;
    s.el = b.event_listener();
    co_await s.el->schedule();
    connection ctl = co_await s.l.accept();
    s.ctl.conn = std::move(ctl);
    s.ctl.out = s.b.pool()->allocate(control_bytes);
    s.ctl.in = s.b.pool()->allocate(control_bytes);
    s.ready = s.b.pool()->allocate_zeroed(64);
    std::exception_ptr failed;
    try {
        co_await serve_requests(&s);
    } catch (...) {
        failed = std::current_exception();
        shut_down_all(s.ctl, s.links);
    }
    try {
        co_await s.phase.join();
    } catch (...) {
    }
    try {
        co_await s.next.join();
    } catch (...) {
    }
    if (failed)
        std::rethrow_exception(failed);
    co_await close_all(&s.ctl, &s.links);
    if (!s.cfg.json) {
        std::printf(" served %" PRIu64 " phases for %s\n%s", s.phases, s.ctl.conn.peer().c_str(), rule);
        std::fflush(stdout);
    }
}

struct client_state {
    builder b;
    config cfg;
    std::shared_ptr<event_listener> el;
    control ctl;
    std::vector<std::unique_ptr<link>> links;
};

/// One phase, the client's part: receives first, then the "phase" request,
/// then the measured coroutines once the server says "go".
task<phase_result> client_phase(client_state* s, std::size_t size, std::uint64_t count,
                                std::vector<std::uint64_t>* samples) {
    const config& cfg = s->cfg;
    task_group group;
    phase_result result;
    std::uint64_t sleeps = 0;
    double cpu = 0;
    clock_type::time_point start;
    std::uint64_t start_ticks = 0;
    std::exception_ptr failed;
    try {
        prepare_links(s->links, cfg, size, count, true, group);
        std::string go = co_await ask(&s->ctl, "phase " + std::to_string(size) + " " + std::to_string(count));
        if (go != "go")
            throw std::runtime_error("the server answered '" + go + "' to a phase");
        sleeps = s->el->sleeps();
        cpu = process_cpu_seconds();
        start = clock_type::now();
        start_ticks = ticks();
        if (remote_ping_pong(cfg)) {
            for (auto& l : s->links) {
                const std::uint64_t share = l->ops.total;
                if (cfg.op == op_type::write)
                    group.spawn(write_pinger(l.get(), size, share, samples));
                else if (cfg.op == op_type::send)
                    group.spawn(asker<op_type::send>(l.get(), size, share, samples));
                else
                    group.spawn(asker<op_type::write_imm>(l.get(), size, share, samples));
            }
        } else {
            with_op(cfg.op, [&]<op_type Op> {
                for (unsigned w = 0; w < cfg.depth; ++w)
                    group.spawn(remote_worker<Op>(s->links[w % s->links.size()].get(), size, samples));
            });
        }
    } catch (...) {
        failed = std::current_exception();
        shut_down_all(s->ctl, s->links);
    }
    try {
        co_await group.join();
    } catch (...) {
        if (!failed)
            failed = std::current_exception();
    }
    if (failed)
        std::rethrow_exception(failed);
    std::uint64_t end_ticks = ticks();
    auto end = clock_type::now();
    if (end_ticks > start_ticks)
        result.ns_per_tick = static_cast<double>(nanoseconds_between(start, end)) /
                             static_cast<double>(end_ticks - start_ticks);
    result.cpu_seconds = process_cpu_seconds() - cpu;
    result.seconds = static_cast<double>(nanoseconds_between(start, end)) * 1e-9;
    result.sleeps = s->el->sleeps() - sleeps;
    co_return result;
}

/// --idle, the client's part: both sides mark the start of their window,
/// nothing moves for cfg.idle_seconds, then the server's figures come back.
task<std::vector<idle_figures>> client_idle(client_state* s) {
    std::string go = co_await ask(&s->ctl, "idle");
    if (go != "go")
        throw std::runtime_error("the server answered '" + go + "' to an idle window");
    idle_mark mark = start_idle(*s->el);
    co_await pause{s->el.get(), std::chrono::seconds(s->cfg.idle_seconds), nullptr};
    std::vector<idle_figures> sides{end_idle(mark, *s->el, "client")};
    if (!s->cfg.json)
        print_idle_row(sides.back());
    std::string answer = co_await ask(&s->ctl, "idle figures");
    idle_figures theirs;
    theirs.side = "server";
    unsigned long long sleeps = 0;
    char polling[32] = {};
    if (std::sscanf(answer.c_str(), "idle %lf %lf %llu %31s", &theirs.seconds, &theirs.cpu_seconds, &sleeps,
                    polling) != 4)
        throw std::runtime_error("the server answered '" + answer + "' for its idle figures");
    theirs.sleeps = sleeps;
    theirs.polling = polling;
    if (!s->cfg.json)
        print_idle_row(theirs);
    sides.push_back(theirs);
    co_return sides;
}

struct client_results {
    std::vector<size_result> sizes;
    std::vector<idle_figures> idle;  // --idle: the client's and the server's
};

task<client_results> run_client(builder b, config cfg) {
    client_state s;
    s.b = b;
    s.cfg = cfg;
    s.el = b.event_listener();
    co_await s.el->schedule();
    const std::string address =
        cfg.host.find(':') == std::string::npos ? cfg.host + ":" + cfg.port : cfg.host;
    connection ctl = co_await s.b.connect(address);
    s.ctl.conn = std::move(ctl);
    s.ctl.out = s.b.pool()->allocate(control_bytes);
    s.ctl.in = s.b.pool()->allocate(control_bytes);
    {
        // The server's receive for the first request is posted.
        remote_mr ready = co_await s.ctl.conn.receive_remote_mr();
    }
    std::string ok = co_await ask(&s.ctl, "plan " + plan_text(cfg));
    if (ok != "ok")
        throw std::runtime_error("the server answered '" + ok + "' to the plan");
    const std::size_t stride = stride_for(cfg);
    for (unsigned k = 0; k < cfg.qps; ++k) {
        connection conn = co_await s.ctl.conn.new_connection();
        s.links.push_back(make_link(s.b, std::move(conn), stride));
        co_await exchange_buffers(s.links.back().get());
    }

    client_results results;
    std::vector<std::uint64_t> samples;
    const bool progress = !cfg.quiet && cfg.sizes.size() > 1;
    if (!cfg.json)
        print_header(cfg, s.el->device()->name(), s.ctl.conn.peer());
    if (cfg.idle_seconds != 0)
        results.idle = co_await client_idle(&s);
    for (std::size_t i = 0; cfg.idle_seconds == 0 && i < cfg.sizes.size(); ++i) {
        std::size_t size = cfg.sizes[i];
        if (progress)
            std::fprintf(stderr, "cordma-perf: [%zu/%zu] %s %s, %s ...\n", i + 1, cfg.sizes.size(), to_string(cfg.op),
                         to_string(cfg.test), human_size(size).c_str());
        if (*cfg.warmup > 0)
            (void)co_await client_phase(&s, size, std::max<std::uint64_t>(*cfg.warmup, cfg.qps), nullptr);
        samples.clear();
        if (cfg.test == test_type::latency)
            samples.reserve(cfg.iterations);  // no allocation while measuring
        phase_result p =
            co_await client_phase(&s, size, cfg.iterations, cfg.test == test_type::latency ? &samples : nullptr);
        size_result r = make_result(cfg, size, p, samples);
        if (!cfg.json)
            print_row(cfg, r);
        results.sizes.push_back(r);
    }
    std::string bye = co_await ask(&s.ctl, "done");
    (void)bye;
    co_await close_all(&s.ctl, &s.links);
    if (!cfg.json) {
        std::printf("%s", rule);
        std::fflush(stdout);
    }
    co_return results;
}

/// A server with nothing to poll: one-sided bandwidth (write, read,
/// fetch_add), where only the client's completions exist.
bool passive_server(const config& cfg) {
    return cfg.mode == "server" && cfg.test == test_type::bandwidth && !needs_receives(cfg.op);
}

builder make_builder(config& cfg) {
    // Such a server sleeps unless told otherwise, as perftest's does (it
    // waits in its socket for the end): a listener spinning for nothing
    // takes the CPU rxe's kernel work needs (64 KiB writes: 36 MB/s against
    // 57 MB/s with the server asleep, in a 2-vCPU VM). Decided from the
    // server's own options, before the client's plan arrives.
    if (passive_server(cfg) && !cfg.polling_given)
        cfg.polling = polling_mode::event;
    builder b;
    b.polling(cfg.polling);
    if (!cfg.device.empty())
        b.device(cfg.device);
    if (cfg.ib_port != 0)
        b.port(static_cast<std::uint8_t>(cfg.ib_port));
    b.gid_index(cfg.gid_index);
    if (cfg.mtu)
        b.path_mtu(*cfg.mtu);
    if (cfg.qp_timeout)
        b.timeout(*cfg.qp_timeout);
    b.send_queue_depth(cfg.qp_depth);
    b.recv_queue_depth(std::max(cfg.qp_depth, cfg.rx_depth));
    // As perftest sets its QPs: a send that finds no receive is retried
    // after 0.64 ms, not the verbs default of 655 ms.
    b.min_rnr_timer(12);
    b.exchange(cfg.exchange);
    agent_limits limits;
    limits.max_lease = grant_lease;
    b.agent_limits(limits);
    return b;
}

}  // namespace

// --metrics: what this side's connections counted, rendered, on stdout.
static void print_metrics(const config& cfg, const metrics_snapshot& m) {
    if (cfg.metrics.empty())
        return;
    std::string text = cfg.metrics == "json" ? to_json(m) + "\n" : to_prometheus(m, {.peer_hosts = true, .connections = true});
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
}

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
        if (cfg.mode == "server") {
            builder b = make_builder(cfg);
            listener l = b.listen(cfg.bind + ":" + cfg.port);
            // The readiness line (tools/lib/server-then-client waits for it).
            std::printf("listening on %s\n", l.address().c_str());
            if (!cfg.json)
                std::printf(" Waiting for client to connect... (%s)\n", b.event_listener()->device()->name().c_str());
            std::fflush(stdout);
            sync_wait(run_server(b, l, cfg));
            print_metrics(cfg, b.metrics());
            return 0;
        }
        if (cfg.mode == "client") {
            builder b = make_builder(cfg);
            client_results results = sync_wait(run_client(b, cfg));
            if (cfg.json && cfg.idle_seconds != 0)
                print_idle_json(cfg, b.event_listener()->device()->name(), results.idle);
            else if (cfg.json)
                print_json(cfg, b.event_listener()->device()->name(), results.sizes);
            print_metrics(cfg, b.metrics());
            return 0;
        }
        auto device = device_context::open(cfg.device);
        auto listener = event_listener::start(device, {.mode = cfg.polling});
        std::vector<qp_pair> pairs = connect_pairs(listener, cfg);
        auto results = sync_wait(run_all(listener, pairs, cfg, device->name()));
        if (cfg.json)
            print_json(cfg, device->name(), results);
        print_metrics(cfg, listener->metrics());
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
