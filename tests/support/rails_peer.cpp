// Two ends of a connection over every rail of a host (builder::rails, the
// devices in RXE_VM_RAIL_DEVICES or CORDMA_TEST_RAILS), for the faults
// suite's rails test (tests/faults/faults.sh rails):
//
// Both take --rails N: only the first N devices (1: no builder::rails, the
// baseline a striped transfer's rate is compared with).
//
//   rails_peer serve ADDR:PORT BYTES [--clients N]
//       accepts N clients (default 1), one after another, gives each a
//       region of BYTES (its key on every rail), and once told, checks
//       every byte the client wrote there
//   rails_peer write ADDR:PORT BYTES [--chunk N] [--fault-at PERCENT
//                                     --fault CMD] [--after CMD]
//                                    [--stall-limit MS] [--expect-down RAIL]
//                                    [--allow-down RAIL]
//       writes BYTES of a pattern into the server's region in writes of
//       --chunk bytes (default 8 MiB, so each is striped), running CMD once
//       PERCENT of them are done (a rail's link taken down); reads the whole
//       region back and checks every byte; has the server check its copy;
//       then runs --after's CMD (the link back up). Fails if any operation
//       failed, any byte is wrong, one write or read took longer than
//       --stall-limit ms (default 10,000), or rail RAIL (--expect-down) is
//       still up when the transfer ends, or another is down (except rail
//       --allow-down's, which may be either). Every other rail must have
//       carried writes.
//       --readmit RAIL: once the transfer is checked, runs --after's CMD at
//       once, waits (at most 60 s) until rail RAIL is up again (admitted
//       again on new queue pairs), then writes and reads back the first
//       --again bytes (default 32 MiB) once more: every byte checked, and
//       rail RAIL must have carried writes since it came back, and this
//       host's rails_peer must hold as many queue pairs as before the
//       transfer (`rdma resource show qp`: the failed rail's are gone).
//
// Prints each rail's state and counters. Connecting waits at most 60 s
// (the other host may still be booting); a peer gone fails every
// operation within the retry time; tools/rxe-vm's time limit bounds the
// rest.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 131 + (i >> 12) + 7) & 0xff); }

/// The first offset of `bytes` that is not the pattern, or -1.
long long first_wrong(const std::byte* bytes, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i)
        if (bytes[i] != pattern(i))
            return static_cast<long long>(i);
    return -1;
}

builder rails_builder(std::size_t count) {
    const char* names = std::getenv("CORDMA_TEST_RAILS");
    if (names == nullptr)
        names = std::getenv("RXE_VM_RAIL_DEVICES");
    std::istringstream in(names != nullptr ? names : "");
    std::vector<std::string> devices;
    for (std::string name; in >> name;)
        devices.push_back(name);
    if (count != 0)
        devices.resize(std::min(devices.size(), count));
    if (devices.empty() || (count != 1 && devices.size() < 2))
        throw std::runtime_error("rails_peer needs two devices or more: run under tools/rxe-vm --rails 2, or set "
                                 "CORDMA_TEST_RAILS");
    builder b;
    b.exchange(endpoint_exchange::tcp).connect_timeout(std::chrono::seconds(60));
    if (devices.size() == 1)
        b.device(devices.front());  // one rail: the comparison's baseline
    else
        b.rails(devices);
    return b;
}

/// Queue pairs rails_peer processes hold on this host now (`rdma resource
/// show qp`, by command name: the faults test runs one per host), or -1
/// if the tool cannot say.
int own_queue_pairs() {
    FILE* out = ::popen("rdma resource show qp 2>/dev/null", "r");
    if (out == nullptr)
        return -1;
    int count = 0;
    char line[512];
    while (std::fgets(line, sizeof line, out) != nullptr)
        if (std::strstr(line, " comm rails_peer") != nullptr)
            ++count;
    return ::pclose(out) == 0 ? count : -1;
}

void print_rails(const char* who, const std::vector<rail_info>& rails) {
    for (const rail_info& r : rails)
        std::printf("rails_peer %s: rail %s QP %u %s: writes %llu (%llu B), reads %llu (%llu B), failed %llu%s%s\n",
                    who, r.device.c_str(), r.qp_num, r.up ? "up" : "DOWN",
                    static_cast<unsigned long long>(r.counters[operation_kind::write].completed),
                    static_cast<unsigned long long>(r.counters[operation_kind::write].bytes),
                    static_cast<unsigned long long>(r.counters[operation_kind::read].completed),
                    static_cast<unsigned long long>(r.counters[operation_kind::read].bytes),
                    static_cast<unsigned long long>(r.counters[operation_kind::write].failed +
                                                    r.counters[operation_kind::read].failed),
                    r.up ? "" : ": ", r.why_down.c_str());
}

int serve_one(builder& b, listener& l, std::size_t size) {
    connection c = sync_wait(l.accept());
    local_mr region = b.pool()->allocate(size, 4096);
    std::memset(region.data(), 0, size);
    local_mr message = b.pool()->allocate(sizeof(remote_slice));
    remote_slice where = region.remote();
    std::memcpy(message.data(), &where, sizeof where);
    local_mr told = b.pool()->allocate(8);
    int rc = sync_wait([&]() -> task<int> {
        co_await c.send(message);
        co_await c.recv(told);  // the client is done writing
        long long wrong = first_wrong(region.data(), size);
        std::int64_t answer = wrong;
        std::memcpy(message.data(), &answer, sizeof answer);
        co_await c.send(message.slice(0, sizeof answer));
        co_await c.recv(told);  // the client has the answer
        if (wrong >= 0)
            std::printf("rails_peer serve: FAILED: byte %lld of the region is wrong\n", wrong);
        else
            std::printf("rails_peer serve: all %zu bytes right\n", size);
        co_return wrong >= 0 ? 1 : 0;
    }());
    print_rails("serve", c.rails());
    return rc;
}

int serve(const std::string& address, std::size_t size, int clients, std::size_t rails) {
    builder b = rails_builder(rails);
    listener l = b.listen(address);
    std::printf("rails_peer serve: listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    int rc = 0;
    for (int i = 0; i < clients; ++i)
        rc |= serve_one(b, l, size);
    return rc;
}

struct write_options {
    std::size_t chunk = 8 << 20;
    int fault_at = -1;
    std::string fault, after;
    long long stall_limit_ms = 10'000;
    int expect_down = -1;
    int allow_down = -1;
    int clients = 1;
    std::size_t rails = 0;  // 0: every device given
    int readmit = -1;
    std::size_t again = 32 << 20;
};

int write(const std::string& address, std::size_t size, const write_options& o) {
    builder b = rails_builder(o.rails);
    // Filled before connecting: the server sends its region's description
    // at once, and a receive not posted within its receiver-not-ready
    // retries (about 4 s) would fail it.
    local_mr source = b.pool()->allocate(size, 4096);
    for (std::size_t i = 0; i < size; ++i)
        source.data()[i] = pattern(i);
    local_mr back = b.pool()->allocate(size, 4096);
    std::memset(back.data(), 0, size);
    local_mr message = b.pool()->allocate(sizeof(remote_slice));
    connection c = sync_wait(b.connect(address));
    const int baseline_qps = own_queue_pairs();
    long long longest_ms = 0;
    long long answer = 0;
    std::vector<rail_info> rails;  // as the transfer ended, before the server closes
    std::vector<rail_info> back_rails;  // after --readmit's second pass
    bool after_done = false;
    long long readmit_ms = -1;
    long long again_wrong = -1;
    auto began = clock_type::now();
    auto timed = [&](auto&& op) -> task<void> {
        auto t0 = clock_type::now();
        co_await std::move(op);
        longest_ms = std::max<long long>(
            longest_ms, std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count());
    };
    remote_slice where;
    sync_wait([&]() -> task<void> {
        co_await c.recv(message);
        std::memcpy(&where, message.data(), sizeof where);
        if (where.length != size)
            throw std::runtime_error("the server's region is " + std::to_string(where.length) + " bytes, not " +
                                     std::to_string(size));
        bool faulted = false;
        for (std::size_t off = 0; off < size; off += o.chunk) {
            std::size_t n = std::min(o.chunk, size - off);
            if (!faulted && o.fault_at >= 0 && off * 100 >= size * static_cast<std::size_t>(o.fault_at)) {
                faulted = true;
                std::printf("rails_peer write: %zu of %zu bytes written: %s\n", off, size, o.fault.c_str());
                std::fflush(stdout);
                if (std::system(o.fault.c_str()) != 0)
                    throw std::runtime_error("the fault command failed: " + o.fault);
            }
            co_await timed(c.write(source.slice(off, n), where.slice(off, n)));
        }
        for (std::size_t off = 0; off < size; off += o.chunk) {
            std::size_t n = std::min(o.chunk, size - off);
            co_await timed(c.read(back.slice(off, n), where.slice(off, n)));
        }
        rails = c.rails();
    }());
    if (o.readmit >= 0) {
        // Polled from this thread (the event listener's runs the rails).
        after_done = true;
        if (!o.after.empty() && std::system(o.after.c_str()) != 0)
            throw std::runtime_error("the after command failed: " + o.after);
        auto t0 = clock_type::now();
        while (!c.rails().at(static_cast<std::size_t>(o.readmit)).up) {
            if (clock_type::now() - t0 > std::chrono::seconds(60))
                throw std::runtime_error("rail " + std::to_string(o.readmit) + " not up again 60 s after: " + o.after);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        readmit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
        std::printf("rails_peer write: rail %d up again %lld ms after: %s\n", o.readmit, readmit_ms, o.after.c_str());
        std::fflush(stdout);
    }
    sync_wait([&]() -> task<void> {
        if (o.readmit >= 0) {
            std::size_t again = std::min(o.again, size);
            std::memset(back.data(), 0, again);
            for (std::size_t off = 0; off < again; off += o.chunk) {
                std::size_t n = std::min(o.chunk, again - off);
                co_await timed(c.write(source.slice(off, n), where.slice(off, n)));
            }
            for (std::size_t off = 0; off < again; off += o.chunk) {
                std::size_t n = std::min(o.chunk, again - off);
                co_await timed(c.read(back.slice(off, n), where.slice(off, n)));
            }
            again_wrong = first_wrong(back.data(), again);
            back_rails = c.rails();
        }
        co_await c.send(message.slice(0, 1));
        co_await c.recv(message);
        std::memcpy(&answer, message.data(), sizeof answer);
        co_await c.send(message.slice(0, 1));
    }());
    double seconds = std::chrono::duration<double>(clock_type::now() - began).count();
    std::printf("rails_peer write: %zu bytes written and read in %.2f s (%.1f MB/s), the longest operation %lld ms\n",
                size, seconds, 2.0 * double(size) / seconds / 1e6, longest_ms);
    int rc = 0;
    if (long long wrong = first_wrong(back.data(), size); wrong >= 0) {
        std::printf("rails_peer write: FAILED: byte %lld read back is wrong\n", wrong);
        rc = 1;
    }
    if (answer >= 0) {
        std::printf("rails_peer write: FAILED: the server found byte %lld wrong\n", answer);
        rc = 1;
    }
    if (longest_ms > o.stall_limit_ms) {
        std::printf("rails_peer write: FAILED: an operation took %lld ms, more than %lld\n", longest_ms,
                    o.stall_limit_ms);
        rc = 1;
    }
    if (again_wrong >= 0) {
        std::printf("rails_peer write: FAILED: byte %lld read back after the rail came back is wrong\n", again_wrong);
        rc = 1;
    }
    if (!after_done && !o.after.empty() && std::system(o.after.c_str()) != 0) {
        std::printf("rails_peer write: FAILED: the after command failed: %s\n", o.after.c_str());
        rc = 1;
    }
    print_rails("write", rails);
    for (std::size_t i = 0; i < rails.size(); ++i) {
        bool want_up = static_cast<int>(i) != o.expect_down;
        if (static_cast<int>(i) != o.allow_down && rails[i].up != want_up) {
            std::printf("rails_peer write: FAILED: rail %zu is %s, expected %s\n", i, rails[i].up ? "up" : "down",
                        want_up ? "up" : "down");
            rc = 1;
        }
        if (static_cast<int>(i) != o.allow_down && rails[i].counters[operation_kind::write].completed == 0) {
            std::printf("rails_peer write: FAILED: rail %zu carried no write\n", i);
            rc = 1;
        }
    }
    if (o.readmit >= 0) {
        // The failed rail's queue pairs are destroyed once their last
        // flushed request is back: bounded, polled.
        int qps = own_queue_pairs();
        for (auto t0 = clock_type::now(); qps != baseline_qps && clock_type::now() - t0 < std::chrono::seconds(10);
             qps = own_queue_pairs())
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::printf("rails_peer write: %d queue pairs held after the rail came back, %d before the transfer\n", qps,
                    baseline_qps);
        if (baseline_qps <= 0 || qps != baseline_qps) {
            std::printf("rails_peer write: FAILED: %d queue pairs held, not the %d of before\n", qps, baseline_qps);
            rc = 1;
        }
        print_rails("write (rail back)", back_rails);
        const rail_info& r = back_rails.at(static_cast<std::size_t>(o.readmit));
        if (!r.up || r.counters[operation_kind::write].completed == 0 || r.qp_num == rails.at(o.readmit).qp_num) {
            std::printf("rails_peer write: FAILED: rail %d is %s on QP %u (was %u) and carried %llu writes since it "
                        "came back\n",
                        o.readmit, r.up ? "up" : "down", r.qp_num, rails.at(o.readmit).qp_num,
                        static_cast<unsigned long long>(r.counters[operation_kind::write].completed));
            rc = 1;
        }
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 4) {
        std::fprintf(stderr, "usage: rails_peer serve|write ADDR:PORT BYTES [options] (see the source's header)\n");
        return 2;
    }
    std::string mode = argv[1];
    std::string address = argv[2];
    std::size_t size = std::strtoull(argv[3], nullptr, 0);
    write_options o;
    for (int i = 4; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::invalid_argument(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--chunk")
            o.chunk = std::strtoull(value().c_str(), nullptr, 0);
        else if (arg == "--fault-at")
            o.fault_at = std::atoi(value().c_str());
        else if (arg == "--fault")
            o.fault = value();
        else if (arg == "--after")
            o.after = value();
        else if (arg == "--stall-limit")
            o.stall_limit_ms = std::atoll(value().c_str());
        else if (arg == "--rails")
            o.rails = std::strtoull(value().c_str(), nullptr, 0);
        else if (arg == "--clients")
            o.clients = std::atoi(value().c_str());
        else if (arg == "--allow-down")
            o.allow_down = std::atoi(value().c_str());
        else if (arg == "--readmit")
            o.readmit = std::atoi(value().c_str());
        else if (arg == "--again")
            o.again = std::strtoull(value().c_str(), nullptr, 0);
        else if (arg == "--expect-down")
            o.expect_down = std::atoi(value().c_str());
        else
            throw std::invalid_argument("unknown option " + arg);
    }
    if (size == 0 || o.chunk == 0)
        throw std::invalid_argument("BYTES and --chunk must be positive");
    if (mode == "serve")
        return serve(address, size, o.clients, o.rails);
    if (mode == "write")
        return write(address, size, o);
    std::fprintf(stderr, "rails_peer: unknown mode '%s'\n", mode.c_str());
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "rails_peer %s: FAILED: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 1;
}
