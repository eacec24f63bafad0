// cordma_connection_memory: what one idle connection pins (registered
// bytes) and holds (heap), for each kind of connection cordma makes
// (issue 32, item 5: the measurement).
//
// For each kind, N idle pairs are opened over one device, and each side is
// measured in a process of its own, so the client's and the server's costs
// come apart: this program (which never touches cordma itself, so it may
// fork) forks a server process, which builds, listens and accepts N, then a
// client process, which builds and connects N, to the server's address.
// Each side measures:
//   before     on entering the child, before any cordma object;
//   one-time   after the builder's shared pieces (event listener, device,
//              protection domain, memory pool) and, on the server, the
//              listener (and the rpc server with its shared receive queue);
//   after      once all N connections are set up (connect / accept / form
//              returned) and --settle seconds have passed, idle.
// and reports one-time = one-time - before, per connection = (after -
// one-time) / N, of:
//   registered  the sum of `mrlen` over the MRs of its pid in
//               `rdma -j resource show mr` (iproute2): every registration,
//               the memory pool's chunks and any other ibv_reg_mr;
//   pool        the builder's memory_pool::bytes_in_use(), the part of the
//               registered bytes actually handed out (the pool registers
//               whole chunks of builder::pool_chunk_size, 4 MiB by
//               default, so `registered` moves in steps of a chunk:
//               run with --pool-chunk-size 4096 to make it follow use);
//   heap        mallinfo2() uordblks + hblkhd (every arena, and blocks
//               malloc mmapped), i.e. bytes malloc handed out and not freed;
//   QPs         queue pairs of its pid in `rdma -j resource show qp`.
// Kinds: plain (builder::agent(false)), agent (the default builder),
// stream (cordma::stream), rpc (rpc::client against rpc::server, default
// options), group (N groups of 2 formed from host lists, rank 0 in the
// "server" process and rank 1 in the "client" one: each rank has one link).
//
// Needs an RDMA device and the rdma tool; run it in the VM:
//   tools/rxe-vm -- build/bench/cordma_connection_memory -n 16
// Prints a Markdown table (KiB per connection) and, with --raw, every
// measurement; CORDMA_MEMORY_DUMP=1 in the environment prints what the rdma
// tool answered each time (on stderr). The rdma tool's "pid" is the id of
// the *thread* that made the resource (most are made on cordma's event
// listener thread), so a side counts the resources of its threads and of
// its protection domains.

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/group.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/pending.hpp>
#include <cordma/rpc.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/when_all.hpp>

#include "../lib/bench_options.hpp"

using namespace cordma;
using namespace std::chrono_literals;

namespace {

struct config {
    int n = 16;
    std::string device;
    std::string address;  // the device's IPv4 address (default: $RXE_VM_ADDR)
    std::vector<std::string> kinds{"plain", "agent", "stream", "rpc", "group"};
    std::size_t pool_chunk_size = 0;  // 0: the builder's default
    double settle = 1.0;
    int group_port = 7900;
    bool raw = false;
};

using cordma_bench::option_reader;
using cordma_bench::parse_number;
using cordma_bench::parse_seconds;
using cordma_bench::usage_error;

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: cordma_connection_memory [options]\n"
                 "  -n N                   idle connections of each kind (default 16)\n"
                 "  -d, --device NAME      RDMA device (default: $RXE_VM_DEVICE, else the first active)\n"
                 "  -a, --address ADDR     the device's IPv4 address (default: $RXE_VM_ADDR)\n"
                 "  --kinds LIST           comma-separated, of plain,agent,stream,rpc,group (default: all)\n"
                 "  --pool-chunk-size B    builder::pool_chunk_size (default: the builder's, 4 MiB)\n"
                 "  --settle S             seconds idle before measuring (default 1)\n"
                 "  --group-port P         first port of the groups' host lists (default 7900; 2N used)\n"
                 "  --raw                  also print every measurement\n"
                 "What is measured and how: the top of bench/memory/cordma_connection_memory.cpp.\n");
}

config parse(int argc, char** argv) {
    config cfg;
    if (const char* d = std::getenv("RXE_VM_DEVICE")) cfg.device = d;
    if (const char* a = std::getenv("RXE_VM_ADDR")) cfg.address = a;
    for (option_reader options(argc, argv, usage); options.next();) {
        std::string_view arg = options.arg(), name = options.name();
        if (name == "-n") {
            cfg.n = static_cast<int>(parse_number(name, options.value(), 1, 4096));
        } else if (name == "-d" || name == "--device") {
            cfg.device = std::string(options.value());
        } else if (name == "-a" || name == "--address") {
            cfg.address = std::string(options.value());
        } else if (name == "--kinds") {
            cfg.kinds.clear();
            std::string list(options.value());
            for (std::size_t at = 0; at <= list.size();) {
                std::size_t comma = list.find(',', at);
                if (comma == std::string::npos) comma = list.size();
                std::string kind = list.substr(at, comma - at);
                if (kind != "plain" && kind != "agent" && kind != "stream" && kind != "rpc" && kind != "group")
                    throw usage_error("--kinds: unknown kind '" + kind + "'");
                cfg.kinds.push_back(kind);
                at = comma + 1;
            }
        } else if (name == "--pool-chunk-size") {
            cfg.pool_chunk_size = static_cast<std::size_t>(parse_number(name, options.value(), 4096, 1L << 30));
        } else if (name == "--settle") {
            cfg.settle = parse_seconds(name, options.value());
        } else if (name == "--group-port") {
            cfg.group_port = static_cast<int>(parse_number(name, options.value(), 1024, 60000));
        } else if (name == "--raw") {
            cfg.raw = true;
        } else {
            throw usage_error("unknown option '" + std::string(arg) + "'");
        }
    }
    if (cfg.address.empty()) throw usage_error("no address: give -a ADDR (inside tools/rxe-vm, $RXE_VM_ADDR is used)");
    return cfg;
}

// ---- measuring ---------------------------------------------------------

std::string run_command(const std::string& command) {
    std::string out;
    std::FILE* p = ::popen(command.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run " + command);
    char buf[4096];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    int status = ::pclose(p);
    if (status != 0) throw std::runtime_error("'" + command + "' failed (status " + std::to_string(status) + ")");
    return out;
}

// The value of the number field "key":123 inside one flat JSON object's text.
bool number_field(std::string_view object, std::string_view key, long long* value) {
    std::string needle = "\"" + std::string(key) + "\":";
    std::size_t at = object.find(needle);
    if (at == std::string_view::npos) return false;
    *value = std::strtoll(std::string(object.substr(at + needle.size(), 24)).c_str(), nullptr, 10);
    return true;
}

// The flat objects of `rdma -j resource show WHAT`, as text.
std::vector<std::string> resources(const std::string& what) {
    std::string json = run_command("rdma -j resource show " + what);
    if (std::getenv("CORDMA_MEMORY_DUMP"))
        std::fprintf(stderr, "[%d] rdma -j resource show %s: %s\n", int(::getpid()), what.c_str(), json.c_str());
    std::vector<std::string> objects;
    for (std::size_t at = json.find('{'); at != std::string::npos; at = json.find('{', at + 1)) {
        std::size_t end = json.find('}', at);
        if (end == std::string::npos) break;
        objects.push_back(json.substr(at, end - at));
        at = end;
    }
    return objects;
}

// The ids of this process's threads. The kernel's resource tracking names
// the *thread* that created a resource ("pid" is its thread id): cordma
// makes most of them on its event listener thread, not the main one.
std::vector<long long> own_thread_ids() {
    std::vector<long long> ids;
    std::string out = run_command("ls /proc/" + std::to_string(::getpid()) + "/task");
    for (std::size_t at = 0; at < out.size();) {
        std::size_t nl = out.find('\n', at);
        if (nl == std::string::npos) nl = out.size();
        if (nl > at) ids.push_back(std::strtoll(out.substr(at, nl - at).c_str(), nullptr, 10));
        at = nl + 1;
    }
    return ids;
}

// Calls f(object text) for each object of `rdma -j resource show WHAT`
// that is this process's: made by one of its threads, or in one of its
// protection domains (a resource whose thread has ended still has its PD).
void for_each_own(const std::string& what, const std::function<void(std::string_view)>& f) {
    std::vector<long long> tids = own_thread_ids();
    auto ours = [&](std::string_view object) {
        long long owner = -1;
        if (!number_field(object, "pid", &owner)) return false;
        for (long long t : tids)
            if (t == owner) return true;
        return false;
    };
    std::vector<long long> pdns;
    for (const auto& pd : resources("pd")) {
        long long pdn = -1;
        if (ours(pd) && number_field(pd, "pdn", &pdn)) pdns.push_back(pdn);
    }
    for (const auto& object : resources(what)) {
        long long pdn = -1;
        bool in_our_pd = false;
        if (number_field(object, "pdn", &pdn))
            for (long long p : pdns) in_our_pd = in_our_pd || p == pdn;
        if (ours(object) || in_our_pd) f(object);
    }
}

long long proc_status_kib(const char* field) {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    std::size_t len = std::strlen(field);
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, field, len) == 0 && line[len] == ':') v = std::strtoll(line + len + 1, nullptr, 10);
    std::fclose(f);
    return v;
}

struct sample {
    long long registered = 0;  // bytes, rdma resource show mr
    long long mrs = 0;
    long long qps = 0;
    long long pool_in_use = 0;
    long long pool_registered = 0;
    long long heap = 0;  // mallinfo2 uordblks + hblkhd
    long long pinned_kib = 0;  // /proc/self/status VmPin
    long long rss_kib = 0;
};

sample measure(const std::shared_ptr<memory_pool>& pool) {
    sample s;
    for_each_own("mr", [&](std::string_view mr) {
        long long len = 0;
        if (!number_field(mr, "mrlen", &len)) throw std::runtime_error("an MR without \"mrlen\": " + std::string(mr));
        s.registered += len;
        ++s.mrs;
    });
    for_each_own("qp", [&](std::string_view) { ++s.qps; });
    if (pool) {
        s.pool_in_use = static_cast<long long>(pool->bytes_in_use());
        s.pool_registered = static_cast<long long>(pool->bytes_registered());
    }
    struct mallinfo2 mi = ::mallinfo2();
    s.heap = static_cast<long long>(mi.uordblks + mi.hblkhd);
    s.pinned_kib = proc_status_kib("VmPin");
    s.rss_kib = proc_status_kib("VmRSS");
    return s;
}

std::string encode(const sample& s) {
    char out[256];
    std::snprintf(out, sizeof out, "%lld %lld %lld %lld %lld %lld %lld %lld", s.registered, s.mrs, s.qps,
                  s.pool_in_use, s.pool_registered, s.heap, s.pinned_kib, s.rss_kib);
    return out;
}

sample decode(const std::string& text) {
    sample s;
    if (std::sscanf(text.c_str(), "%lld %lld %lld %lld %lld %lld %lld %lld", &s.registered, &s.mrs, &s.qps,
                    &s.pool_in_use, &s.pool_registered, &s.heap, &s.pinned_kib, &s.rss_kib) != 8)
        throw std::runtime_error("a side sent '" + text + "'");
    return s;
}

// ---- the two sides, each in a child process ----------------------------

// A line to the parent, or from it.
void write_line(int fd, const std::string& line) {
    std::string text = line + "\n";
    for (std::size_t at = 0; at < text.size();) {
        ssize_t put = ::write(fd, text.data() + at, text.size() - at);
        if (put <= 0) throw std::runtime_error("write to the parent failed");
        at += static_cast<std::size_t>(put);
    }
}

std::string read_line(int fd) {
    std::string line;
    char c;
    while (true) {
        ssize_t got = ::read(fd, &c, 1);
        if (got <= 0) return line.empty() ? std::string("EOF") : line;
        if (c == '\n') return line;
        line += c;
    }
}

builder make_builder(const config& cfg) {
    builder b;
    if (!cfg.device.empty()) b.device(cfg.device);
    if (cfg.pool_chunk_size) b.pool_chunk_size(cfg.pool_chunk_size);
    // Only so N handshakes in an emulated VM never time out; no memory
    // depends on it.
    b.connect_timeout(60s);
    return b;
}

void settle(const config& cfg) { std::this_thread::sleep_for(std::chrono::duration<double>(cfg.settle)); }

// What each side keeps alive until the parent says go.
struct held {
    std::vector<connection> connections;
    std::vector<stream> streams;
    std::vector<rpc::client> clients;
    std::vector<group> groups;
    std::unique_ptr<rpc::server> server;
    listener plain_listener;
    stream_listener streams_listener;
    std::stop_source stop;
    std::vector<pending<void>> serving;
};

task<void> serve_on_listener_thread(rpc::server* s, listener l, std::stop_token token,
                                    std::shared_ptr<event_listener> el) {
    co_await el->schedule();
    co_await s->serve(std::move(l), token);
}

task<group> form_group(builder b, std::vector<std::string> hosts, int rank) {
    group_options o = group_options::from_hosts(std::move(hosts), rank);
    o.formation_timeout = 120s;
    co_return co_await group::form(b, o);
}

// Runs one side; writes "addr ADDRESS" (server, once listening), then
// "result ONE_TIME_BASE ONE_TIME AFTER" (three samples), then waits for
// "go" and ends.
[[noreturn]] void run_side(const config& cfg, const std::string& kind, bool server, int to_parent, int from_parent,
                           const std::string& server_address) {
    int rc = 0;
    try {
        held h;
        sample before = measure(nullptr);
        builder b = make_builder(cfg);
        std::string listen_at = cfg.address + ":0";
        if (kind == "plain") b.agent(false);
        if (server && kind == "rpc") h.server = std::make_unique<rpc::server>(b);
        b.event_listener();
        auto pool = b.pool();
        if (server) {
            std::string address;
            if (kind == "plain" || kind == "agent") {
                h.plain_listener = b.listen(listen_at);
                address = h.plain_listener.address();
            } else if (kind == "stream") {
                h.streams_listener = stream::serve(b, listen_at);
                address = h.streams_listener.address();
            } else if (kind == "rpc") {
                listener l = b.listen(listen_at);
                address = l.address();
                h.serving.push_back(start(serve_on_listener_thread(h.server.get(), std::move(l), h.stop.get_token(),
                                                                   b.event_listener())));
            }
            sample one_time = measure(pool);
            write_line(to_parent, "addr " + (address.empty() ? std::string("-") : address));
            if (kind == "plain" || kind == "agent") {
                for (int i = 0; i < cfg.n; ++i) h.connections.push_back(sync_wait(h.plain_listener.accept()));
            } else if (kind == "stream") {
                for (int i = 0; i < cfg.n; ++i) h.streams.push_back(sync_wait(h.streams_listener.accept()));
            } else if (kind == "rpc") {
                auto limit = std::chrono::steady_clock::now() + 120s;
                while (h.server->clients() < static_cast<std::size_t>(cfg.n)) {
                    if (std::chrono::steady_clock::now() > limit)
                        throw std::runtime_error("rpc: " + std::to_string(h.server->clients()) + " of " +
                                                 std::to_string(cfg.n) + " clients after 120 s");
                    std::this_thread::sleep_for(10ms);
                }
            } else if (kind == "group") {
                std::vector<task<group>> forms;
                for (int i = 0; i < cfg.n; ++i) {
                    int port = cfg.group_port + 2 * i;
                    forms.push_back(form_group(b, {cfg.address + ":" + std::to_string(port),
                                                   cfg.address + ":" + std::to_string(port + 1)}, 0));
                }
                h.groups = sync_wait(when_all(std::move(forms)));
            }
            settle(cfg);
            sample after = measure(pool);
            write_line(to_parent, "result " + encode(before) + " " + encode(one_time) + " " + encode(after));
        } else {
            sample one_time = measure(pool);
            if (kind == "plain" || kind == "agent") {
                for (int i = 0; i < cfg.n; ++i) h.connections.push_back(sync_wait(b.connect(server_address)));
            } else if (kind == "stream") {
                for (int i = 0; i < cfg.n; ++i) h.streams.push_back(sync_wait(stream::connect(b, server_address)));
            } else if (kind == "rpc") {
                for (int i = 0; i < cfg.n; ++i) h.clients.push_back(sync_wait(rpc::client::connect(b, server_address)));
            } else if (kind == "group") {
                std::vector<task<group>> forms;
                for (int i = 0; i < cfg.n; ++i) {
                    int port = cfg.group_port + 2 * i;
                    forms.push_back(form_group(b, {cfg.address + ":" + std::to_string(port),
                                                   cfg.address + ":" + std::to_string(port + 1)}, 1));
                }
                h.groups = sync_wait(when_all(std::move(forms)));
            }
            settle(cfg);
            sample after = measure(pool);
            write_line(to_parent, "result " + encode(before) + " " + encode(one_time) + " " + encode(after));
        }
        std::string go = read_line(from_parent);
        (void)go;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma_connection_memory: %s %s: %s\n", kind.c_str(), server ? "server" : "client",
                     e.what());
        write_line(to_parent, std::string("error ") + e.what());
        rc = 1;
    }
    // Connections, listeners and servers are left to the end of the
    // process: only their idle cost is measured, not their teardown.
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
}

struct child {
    pid_t pid = -1;
    int from = -1;  // its lines
    int to = -1;    // our "go"
};

child spawn(const config& cfg, const std::string& kind, bool server, const std::string& address) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe failed");
    std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::close(up[0]);
        ::close(down[1]);
        run_side(cfg, kind, server, up[1], down[0], address);
    }
    ::close(up[1]);
    ::close(down[0]);
    return {pid, up[0], down[1]};
}

struct side_result {
    sample before, one_time, after;
};

side_result parse_result(const std::string& line, const char* who) {
    if (line.rfind("result ", 0) != 0) throw std::runtime_error(std::string(who) + ": " + line);
    std::vector<std::string> fields;
    std::size_t at = 7;
    for (int s = 0; s < 3; ++s) {
        std::string part;
        for (int k = 0; k < 8; ++k) {
            std::size_t space = line.find(' ', at);
            std::string word = line.substr(at, space == std::string::npos ? std::string::npos : space - at);
            part += (k ? " " : "") + word;
            at = space == std::string::npos ? line.size() : space + 1;
        }
        fields.push_back(part);
    }
    return {decode(fields[0]), decode(fields[1]), decode(fields[2])};
}

struct kind_result {
    std::string kind;
    side_result server, client;
};

kind_result run_kind(const config& cfg, const std::string& kind) {
    child s = spawn(cfg, kind, true, "");
    std::string line = read_line(s.from);
    if (line.rfind("addr ", 0) != 0) {
        ::waitpid(s.pid, nullptr, 0);
        throw std::runtime_error(kind + " server: " + line);
    }
    std::string address = line.substr(5);
    child c = spawn(cfg, kind, false, address);
    std::string server_line = read_line(s.from);
    std::string client_line = read_line(c.from);
    write_line(s.to, "go");
    write_line(c.to, "go");
    ::waitpid(c.pid, nullptr, 0);
    ::waitpid(s.pid, nullptr, 0);
    for (int fd : {s.from, s.to, c.from, c.to}) ::close(fd);
    kind_result r{kind, parse_result(server_line, "server"), parse_result(client_line, "client")};
    return r;
}

// ---- the report --------------------------------------------------------

std::string kib(double bytes) {
    char out[32];
    std::snprintf(out, sizeof out, "%.1f", bytes / 1024.0);
    return out;
}

const char* label(const std::string& kind) {
    if (kind == "plain") return "plain connection (`agent(false)`)";
    if (kind == "agent") return "connection with the agent (default)";
    if (kind == "stream") return "`cordma::stream`";
    if (kind == "rpc") return "`rpc::client` / rpc server per client";
    if (kind == "group") return "group link (group of 2, one link per rank)";
    return "?";
}

void print_raw(const kind_result& r) {
    for (int server = 1; server >= 0; --server) {
        const side_result& s = server ? r.server : r.client;
        for (int k = 0; k < 3; ++k) {
            const sample& m = k == 0 ? s.before : k == 1 ? s.one_time : s.after;
            std::printf("raw %-6s %-6s %-8s registered=%lld mrs=%lld qps=%lld pool_in_use=%lld pool_registered=%lld "
                        "heap=%lld VmPin_kB=%lld VmRSS_kB=%lld\n",
                        r.kind.c_str(), server ? "server" : "client", k == 0 ? "before" : k == 1 ? "one-time" : "after",
                        m.registered, m.mrs, m.qps, m.pool_in_use, m.pool_registered, m.heap, m.pinned_kib,
                        m.rss_kib);
        }
    }
}

}  // namespace

int main(int argc, char** argv) try {
    config cfg = parse(argc, argv);
    std::vector<kind_result> results;
    for (const auto& kind : cfg.kinds) {
        results.push_back(run_kind(cfg, kind));
        if (cfg.raw) print_raw(results.back());
        std::fflush(stdout);
    }
    const double n = cfg.n;
    std::printf("\nN = %d idle connections of each kind, each side in a process of its own; pool_chunk_size %s.\n"
                "KiB per connection = (after N connections - after the one-time setup) / N. registered: every MR of "
                "the process (rdma resource show mr); of which pool: chunks the builder's memory pool registered; "
                "own MRs: the rest; pool in use: memory_pool::bytes_in_use(); heap: mallinfo2 uordblks + hblkhd, "
                "less the pool's chunks (malloc'd, counted as registered); resident: VmRSS (everything touched: heap, "
                "registered memory, work slots, the driver's queue rings).\n\n",
                cfg.n, cfg.pool_chunk_size ? (std::to_string(cfg.pool_chunk_size) + " B").c_str() : "default (4 MiB)");
    std::printf("| kind | side | registered | of which pool chunks | own MRs | pool in use | own MRs + pool in use | "
                "heap | resident | QPs | one-time registered | one-time heap |\n");
    std::printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (const auto& r : results) {
        for (int server = 0; server <= 1; ++server) {
            const side_result& s = server ? r.server : r.client;
            std::string side = r.kind == "group" ? (server ? "rank 0" : "rank 1") : (server ? "server" : "client");
            double registered = double(s.after.registered - s.one_time.registered);
            double chunks = double(s.after.pool_registered - s.one_time.pool_registered);
            double in_use = double(s.after.pool_in_use - s.one_time.pool_in_use);
            double heap = double(s.after.heap - s.one_time.heap) - chunks;
            double once_chunks = double(s.one_time.pool_registered - s.before.pool_registered);
            double resident = 1024.0 * double(s.after.rss_kib - s.one_time.rss_kib);
            std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.3g | %s | %s |\n", label(r.kind),
                        side.c_str(), kib(registered / n).c_str(), kib(chunks / n).c_str(),
                        kib((registered - chunks) / n).c_str(), kib(in_use / n).c_str(),
                        kib((registered - chunks + in_use) / n).c_str(), kib(heap / n).c_str(),
                        kib(resident / n).c_str(), double(s.after.qps - s.one_time.qps) / n,
                        kib(double(s.one_time.registered - s.before.registered)).c_str(),
                        kib(double(s.one_time.heap - s.before.heap) - once_chunks).c_str());
        }
    }
    std::fflush(stdout);
    return 0;
} catch (const usage_error& e) {
    std::fprintf(stderr, "cordma_connection_memory: %s\n", e.what());
    usage(stderr);
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "cordma_connection_memory: %s\n", e.what());
    return 1;
}
