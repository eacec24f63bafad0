// The verbs and agent traffic of the faults suite (tests/faults/), one
// process per end, every byte checked, every wait bounded.
//
//   fault_peer serve ADDR:PORT --clients N [--may-fail K]
//              [--fault-after M --fault 'SHELL COMMAND' | --fault-before-reply 'SHELL COMMAND']
//              [--pressure-to ADDR:PORT --ops N --fail-within MS]
//       Accepts N connections and serves each (below) until its client
//       says goodbye. --fault: once M messages have been served, runs the
//       command (on a thread of its own: `ip link set eth0 down`, a power
//       off). --fault-before-reply: runs it before the reply to message M
//       is sent, and waits for it (the reply then meets the fault: a link
//       that is down fails this side's send at once). --pressure-to: once the first client is being served, also
//       runs `pressure` (below) from a builder of its own, to show that a
//       peer failing under pressure leaves the other clients served and
//       frees everything of its own; then tells its clients the run is
//       over (their traffic --until-told ends). Exit 0 only if at most K connections
//       failed (default 0) and no check did.
//   fault_peer traffic ADDR:PORT --seconds S [--until-told] [--expect-retransmissions]
//       Every kind of operation at once for S seconds on 4 connections
//       (--until-told: until the server's answer to an echo says the run
//       is over, which must come within S seconds):
//       send/recv with and without immediate (echoed and checked),
//       write_with_imm (checked by the server, acknowledged),
//       write + read back, fetch_add (every old value seen exactly once),
//       compare_swap (a chain that must never skip), and agent calls
//       (request_remote_mr, written, read back, released). No error may
//       surface: RC retransmission recovers lost and reordered packets.
//       One exception, rxe's own: an atomic it completes without writing
//       the old value (under loss, beside writes; connection_completions.cpp's
//       atomic_result_lost) fails with cordma::errc::atomic_result_lost. Those are
//       counted, and the fetch_add values never seen must equal their number.
//       Prints the device's retransmission counters over the run;
//       --expect-retransmissions (a lossy link): fails if they show none.
//   fault_peer pressure ADDR:PORT --ops N --fail-within MS [--reconnect]
//       Keeps N writes and reads in flight (plus the echo the server counts
//       its fault by) until the connection fails, then requires: every one
//       of them failed, the last within MS of the last success, every error
//       saying the peer stopped acknowledging, and the metrics counting
//       exactly that (N writes and reads failed, one retry_exc_err
//       completion then flushes, the end a failed completion). --reconnect: then connects
//       again (the link is back), runs checked traffic, and requires this
//       process's RDMA resources and fds to be what they were with the old
//       connection, and after the builder is gone, what they were before.
//   fault_peer soak ADDR --connections C --depth D --seconds S
//       C connections to a listener in this same process, D writes and
//       reads in flight on each for S seconds, each read checked against
//       its write; every operation completes exactly once; resident
//       memory and fds sampled each second must not grow from second 5 on.
//   Every mode: --ack-timeout CODE sets builder::timeout (4.096 us * 2^CODE
//   a try) on every builder the process makes: the power-off scenario's
//   loaded VMs need more than the default 67 ms (tests/faults/
//   pressure_guest.sh says why).
//
// The server's side of a connection: it grants the client a region
// (send_local_mr) for write_with_imm, then takes messages through a
// receive_queue: a message is checked (sequence, length, pattern,
// immediate) and echoed, with the immediate when it had one; a
// write_with_imm's immediate (top bit set) names the slot, whose bytes are
// checked and acknowledged by an 8-byte send. Connecting retries for 60 s
// (the other VM may still be booting: the connect is the only readiness
// there is across hosts).

#include <signal.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/device.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/error.hpp>
#include <cordma/listener.hpp>
#include <cordma/metrics.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/remote_mr.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "support/process_resources.hpp"

using namespace cordma;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr std::uint32_t note_bit = 0x80000000u;
constexpr std::uint32_t flag_imm = 1, flag_bye = 2;
/// Set by the server in an echo's answer: the run is over (traffic --until-told).
constexpr std::uint32_t flag_stop = 4;
constexpr std::size_t max_payload = 8192;
constexpr std::size_t slot_size = 4096, slots = 16;
/// Regions must outlive every run (the owner's default lease is 30 s).
constexpr milliseconds lease{600'000};

struct header {
    std::uint64_t seq;
    std::uint32_t length;
    std::uint32_t flags;
};
constexpr std::size_t message_size = sizeof(header) + max_payload;

std::byte pattern(std::uint64_t seed, std::uint64_t i) {
    std::uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    return std::byte(x >> 32);
}

void fill(std::span<std::byte> bytes, std::uint64_t seed) {
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = pattern(seed, i);
}

/// The first byte that is not the pattern's, or -1.
long mismatch(std::span<const std::byte> bytes, std::uint64_t seed) {
    for (std::size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] != pattern(seed, i))
            return long(i);
    return -1;
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

/// Every thread's stack, from gdb where it is installed: what a wait with
/// no way out was waiting for.
void dump_threads() {
    if (std::system("command -v gdb >/dev/null 2>&1") != 0)
        return;
    std::string command = "gdb -batch -nx -p " + std::to_string(getpid()) +
                          " -ex 'thread apply all bt' 2>/dev/null | grep -v '^\\[New LWP' >&2";
    [[maybe_unused]] int rc = std::system(command.c_str());
}

/// Ends the process with a message if it is still running at its limit:
/// a lost completion leaves a coroutine waiting forever, and the test must
/// say so itself rather than be killed by meson's timeout.
class watchdog {
public:
    watchdog(std::string what, std::chrono::seconds limit)
        : thread_([this, what = std::move(what), limit] {
              std::unique_lock lock(mutex_);
              if (!done_cv_.wait_for(lock, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "fault_peer: DEADLINE: %s still running after %lld s (a lost completion, or a "
                                       "wait with no way out)\n",
                               what.c_str(), static_cast<long long>(limit.count()));
                  std::fflush(nullptr);
                  dump_threads();
                  std::_Exit(3);
              }
          }) {}
    ~watchdog() {
        {
            std::lock_guard lock(mutex_);
            done_ = true;
        }
        done_cv_.notify_all();
        thread_.join();
    }

private:
    std::mutex mutex_;
    std::condition_variable done_cv_;
    bool done_ = false;
    std::thread thread_;
};

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

/// --ack-timeout, if given: applied to every builder this process makes.
std::optional<std::uint8_t> ack_timeout;

builder make_builder() {
    builder b;
    if (ack_timeout)
        b.timeout(*ack_timeout);
    return b;
}

/// Connects, retrying while nothing answers there yet (the other VM may be
/// booting, or its link just came back).
/// Each attempt's failure is printed when it differs from the one before
/// (a run that fails names every step it went through, not only its last).
connection connect_retrying(builder& b, const std::string& address, std::chrono::seconds limit) {
    auto began = clock_type::now();
    auto until = began + limit;
    std::string last_error;
    for (int attempt = 1;; ++attempt) {
        auto tried = clock_type::now();
        try {
            return sync_wait(b.connect(address));
        } catch (const std::system_error& e) {
            if (e.what() != last_error) {
                std::printf("fault_peer: connect attempt %d to %s, %.0f ms in, failed after %.0f ms: %s\n", attempt,
                            address.c_str(), ms_between(began, tried), ms_between(tried, clock_type::now()), e.what());
                std::fflush(stdout);
                last_error = e.what();
            }
            if (clock_type::now() > until)
                throw std::runtime_error("could not connect to " + address + " within " +
                                         std::to_string(limit.count()) + " s: " + e.what());
            std::this_thread::sleep_for(milliseconds(200));  // between attempts, not for readiness
        }
    }
}

// ---------------------------------------------------------------- serve

struct server_state {
    std::shared_ptr<memory_pool> pool;
    std::atomic<std::uint64_t> messages{0}, notes{0};
    std::atomic<int> started{0}, finished{0}, failed{0};
    std::uint64_t fault_after = 0;
    std::string fault_command;
    std::string fault_before_reply;
    std::atomic<bool> fault_started{false};
    std::thread fault_thread;
    /// Set when the run is over: echo answers then tell the clients to stop.
    std::atomic<bool> wind_down{false};
    /// A client silent this long is taken for gone (its link or host died
    /// while this side had nothing to send, so no retry could notice);
    /// 0: never.
    std::chrono::seconds idle{0};

    void before_reply() {
        if (fault_before_reply.empty() || messages + 1 < fault_after || fault_started.exchange(true))
            return;
        std::printf("fault_peer serve: replying to message %llu; fault first: %s\n",
                    (unsigned long long)(messages + 1), fault_before_reply.c_str());
        std::fflush(stdout);
        int rc = std::system(fault_before_reply.c_str());
        std::printf("fault_peer serve: the fault command exited with %d\n", rc);
        std::fflush(stdout);
    }

    void served_one() {
        std::uint64_t n = ++messages;
        if (!fault_command.empty() && n >= fault_after && !fault_started.exchange(true)) {
            std::printf("fault_peer serve: %llu messages served; fault: %s\n", (unsigned long long)n,
                        fault_command.c_str());
            std::fflush(stdout);
            fault_thread = std::thread([command = fault_command] {
                int rc = std::system(command.c_str());
                std::printf("fault_peer serve: the fault command exited with %d\n", rc);
                std::fflush(stdout);
            });
        }
    }
};

task<void> serve_one(connection conn, server_state* st) {
    std::string failure;
    std::uint64_t expect_message = 0, expect_note = 0;
    ++st->started;
    try {
        local_mr region = st->pool->allocate_zeroed(slots * slot_size);
        co_await conn.send_local_mr(region.all(), lease);
        receive_queue queue(conn, 16, message_size);
        local_mr reply = st->pool->allocate(message_size);
        for (;;) {
            // (Not a ?: of two co_awaits: g++ 12 destroys such temporaries twice.)
            received_message m;
            if (st->idle.count() > 0)
                m = co_await queue.next(st->idle);
            else
                m = co_await queue.next();
            std::optional<std::uint32_t> imm = m.imm();
            if (imm && (*imm & note_bit)) {
                std::uint64_t seq = *imm & ~note_bit;
                if (seq != (expect_note & ~note_bit))
                    fail("write_with_imm " + std::to_string(seq) + " arrived, " + std::to_string(expect_note) +
                         " was next");
                ++expect_note;
                std::span<std::byte> slot(region.data() + (seq % slots) * slot_size, slot_size);
                if (long at = mismatch(slot, seq | note_bit); at >= 0)
                    fail("write_with_imm " + std::to_string(seq) + ": byte " + std::to_string(at) + " is wrong");
                m.release();
                std::memcpy(reply.data(), &seq, sizeof seq);
                co_await conn.send(reply.slice(0, sizeof seq));
                ++st->notes;
                continue;
            }
            header h;
            if (m.size() < sizeof h)
                fail("a message of " + std::to_string(m.size()) + " bytes, shorter than its header");
            std::memcpy(&h, m.data(), sizeof h);
            if (h.seq != expect_message)
                fail("message " + std::to_string(h.seq) + " arrived, " + std::to_string(expect_message) +
                     " was next (lost or duplicated)");
            ++expect_message;
            if (h.flags & flag_bye) {
                m.release();
                // The goodbye's answer. The client closes once it has it, and
                // on a lossy link its disconnect can overtake the ACK of this
                // send, which then completes flushed although it arrived: a
                // failure here ends the connection as the client's close does
                // (had the client not got it, the client fails the test).
                bool answered = true;
                try {
                    co_await conn.send(reply.slice(0, sizeof h));
                } catch (const std::exception&) {
                    answered = false;
                }
                if (!answered)
                    break;
                // The client closes, not this side: closing here could reach
                // it (the rdma_cm disconnect) before the acknowledgement of
                // its goodbye, whose send would then be flushed, although
                // this side got it.
                // On a lossy link the disconnect itself (a CM message,
                // not reliable) can be lost: after 10 s the goodbye stands.
                bool closed = false;
                try {
                    received_message after = co_await queue.next(std::chrono::seconds(10));
                } catch (const disconnected_error&) {
                    closed = true;
                } catch (const std::system_error& e) {
                    closed = e.code() == std::errc::timed_out;
                }
                if (!closed)
                    fail("a message after the goodbye");
                break;
            }
            if (h.length > max_payload || m.size() != sizeof h + h.length)
                fail("message " + std::to_string(h.seq) + ": " + std::to_string(m.size()) + " bytes for a payload of " +
                     std::to_string(h.length));
            bool want_imm = (h.flags & flag_imm) != 0;
            if (want_imm != imm.has_value() || (imm && *imm != std::uint32_t(h.seq)))
                fail("message " + std::to_string(h.seq) + ": wrong immediate");
            if (long at = mismatch(m.bytes().subspan(sizeof h), h.seq); at >= 0)
                fail("message " + std::to_string(h.seq) + ": byte " + std::to_string(at) + " is wrong");
            std::memcpy(reply.data(), m.data(), m.size());
            if (st->wind_down) {
                h.flags |= flag_stop;
                std::memcpy(reply.data(), &h, sizeof h);
            }
            st->before_reply();
            std::size_t size = m.size();
            m.release();
            if (want_imm)
                co_await conn.send_with_imm(reply.slice(0, size), std::uint32_t(h.seq));
            else
                co_await conn.send(reply.slice(0, size));
            st->served_one();
        }
        co_await conn.close();
    } catch (const std::exception& e) {
        failure = e.what();
    }
    std::printf("fault_peer serve: connection from %s: %llu messages, %llu write_with_imm: %s\n", conn.peer().c_str(),
                (unsigned long long)expect_message, (unsigned long long)expect_note,
                failure.empty() ? "closed by its client" : ("FAILED: " + failure).c_str());
    std::fflush(stdout);
    if (!failure.empty())
        ++st->failed;
    ++st->finished;
}

// ---------------------------------------------------------------- the client's workers

struct client_state {
    std::atomic<bool> stop{false};
    /// An echo's answer said the run is over (the server's flag_stop).
    std::atomic<bool> told_to_stop{false};
    std::atomic<std::uint64_t> completions{0};
    // Atomics rxe completed without their result (connection_state's
    // atomic_result_lost): reported as an error, never as a wrong value.
    std::atomic<std::uint64_t> adds_lost{0}, swaps_lost{0};
    std::mutex mutex;
    std::vector<std::string> errors;

    void error(const std::string& what) {
        std::lock_guard lock(mutex);
        errors.push_back(what);
    }
};

/// One message at a time: the echo's receive is posted before the send.
task<void> echo_worker(connection conn, std::shared_ptr<memory_pool> pool, client_state* cs, std::uint64_t* seq_io,
                       std::uint64_t count_limit) {
    local_mr out = pool->allocate(message_size);
    local_mr in = pool->allocate(message_size);
    std::uint64_t& seq = *seq_io;
    while (!cs->stop && seq < count_limit) {
        header h{seq, std::uint32_t(1 + (seq * 977) % max_payload), (seq % 2) ? flag_imm : 0u};
        std::memcpy(out.data(), &h, sizeof h);
        fill(out.bytes().subspan(sizeof h, h.length), seq);
        local_slice message = out.slice(0, sizeof h + h.length);
        recv_result got;
        if (h.flags & flag_imm) {
            auto [r, sent] = co_await when_all(conn.recv(in.all()), conn.send_with_imm(message, std::uint32_t(seq)));
            got = r;
        } else {
            auto [r, sent] = co_await when_all(conn.recv(in.all()), conn.send(message));
            got = r;
        }
        header answer{};
        std::memcpy(&answer, in.data(), std::min<std::size_t>(got.length, sizeof answer));
        if (got.length >= sizeof answer && (answer.flags & flag_stop)) {
            cs->told_to_stop = true;
            cs->stop = true;
            answer.flags &= ~flag_stop;
            std::memcpy(in.data(), &answer, sizeof answer);
        }
        if (got.length != sizeof h + h.length || std::memcmp(in.data(), out.data(), got.length) != 0)
            fail("echo " + std::to_string(seq) + ": the answer differs from the message");
        if ((h.flags & flag_imm) ? (!got.imm || *got.imm != std::uint32_t(seq)) : got.imm.has_value())
            fail("echo " + std::to_string(seq) + ": wrong immediate");
        ++seq;
        cs->completions += 2;
    }
}

task<void> say_goodbye(connection conn, std::shared_ptr<memory_pool> pool, std::uint64_t seq) {
    local_mr out = pool->allocate(sizeof(header));
    local_mr in = pool->allocate(message_size);
    header h{seq, 0, flag_bye};
    std::memcpy(out.data(), &h, sizeof h);
    co_await when_all(conn.recv(in.all()), conn.send(out.all()));
    co_await conn.close();
}

/// write_with_imm into the server's slots, one at a time, each checked and
/// acknowledged by the server.
task<void> note_worker(connection conn, std::shared_ptr<memory_pool> pool, remote_slice slots_region,
                       client_state* cs) {
    local_mr out = pool->allocate(slot_size);
    local_mr ack = pool->allocate(64);
    for (std::uint64_t seq = 0; !cs->stop; ++seq) {
        fill(out.bytes(), seq | note_bit);
        remote_slice target = slots_region.slice((seq % slots) * slot_size, slot_size);
        auto [got, written] =
            co_await when_all(conn.recv(ack.all()), conn.write_with_imm(out.all(), target, std::uint32_t(seq | note_bit)));
        std::uint64_t acked = 0;
        std::memcpy(&acked, ack.data(), sizeof acked);
        if (got.length != sizeof acked || acked != seq)
            fail("write_with_imm " + std::to_string(seq) + ": acknowledged as " + std::to_string(acked));
        cs->completions += 2;
    }
}

/// Writes a pattern to its own slot of `remote`, reads it back, checks.
task<void> write_read_worker(connection conn, local_slice mine, local_slice back, remote_slice remote, std::uint64_t id,
                             client_state* cs) {
    for (std::uint64_t round = 0; !cs->stop; ++round) {
        std::uint64_t seed = (id << 32) | round;
        fill(mine.bytes(), seed);
        co_await conn.write(mine, remote);
        co_await conn.read(back, remote);
        if (long at = mismatch(back.bytes(), seed); at >= 0)
            fail("read back " + std::to_string(id) + "/" + std::to_string(round) + ": byte " + std::to_string(at) +
                 " is not what was written");
        cs->completions += 2;
    }
}

/// An atomic rxe carried out but completed without its old value: cordma
/// reports it with its own error code (never as a wrong value).
bool result_lost(const std::system_error& e) { return e.code() == cordma::errc::atomic_result_lost; }

/// fetch_add on a shared word; every old value is recorded, and must be
/// seen exactly once in all (or never, for an add whose result was lost).
task<void> add_worker(connection conn, remote_slice word, std::vector<std::uint32_t>* seen, client_state* cs) {
    while (!cs->stop) {
        std::uint64_t old = 0;
        try {
            old = co_await conn.fetch_add(word, 1);
        } catch (const std::system_error& e) {
            if (!result_lost(e))
                throw;
            ++cs->adds_lost;  // the add was made; its old value is the one never seen
            continue;
        }
        if (old >= seen->size())
            fail("fetch_add returned " + std::to_string(old) + ", more than were made");
        ++(*seen)[old];
        ++cs->completions;
    }
}

/// compare_swap n -> n+1 on a word only it touches: each must find n.
task<void> swap_worker(connection conn, remote_slice word, client_state* cs) {
    for (std::uint64_t n = 0; !cs->stop; ++n) {
        std::uint64_t old = n;
        try {
            old = co_await conn.compare_swap(word, n, n + 1);
        } catch (const std::system_error& e) {
            if (!result_lost(e))
                throw;
            // Only this worker touches the word, which held n: the swap
            // was made, and the next one must find n + 1.
            ++cs->swaps_lost;
        }
        if (old != n)
            fail("compare_swap " + std::to_string(n) + " -> " + std::to_string(n + 1) + " found " +
                 std::to_string(old));
        ++cs->completions;
    }
}

/// Agent calls: a region requested, written, read back and released.
task<void> agent_worker(connection conn, std::shared_ptr<memory_pool> pool, client_state* cs) {
    local_mr mine = pool->allocate(16384);
    local_mr back = pool->allocate(16384);
    for (std::uint64_t round = 0; !cs->stop; ++round) {
        std::size_t size = 512 << (round % 6);
        remote_mr region = co_await conn.request_remote_mr(size);
        if (region.size() < size)
            fail("request_remote_mr(" + std::to_string(size) + ") granted " + std::to_string(region.size()));
        fill(mine.bytes().first(size), round);
        co_await conn.write(mine.slice(0, size), region.slice(0, size));
        co_await conn.read(back.slice(0, size), region.slice(0, size));
        if (long at = mismatch(back.bytes().first(size), round); at >= 0)
            fail("agent region " + std::to_string(round) + ": byte " + std::to_string(at) + " is wrong");
        region = remote_mr{};  // dropped: the agent tells the owner it may free it
        cs->completions += 3;
    }
}

/// Runs `body`, recording its failure instead of throwing.
task<void> guarded(task<void> body, client_state* cs, std::string name) {
    try {
        co_await std::move(body);
    } catch (const std::exception& e) {
        cs->error(name + ": " + e.what());
        cs->stop = true;
    }
}

// ---------------------------------------------------------------- traffic

/// The device's own counts of retransmissions since `before`, as rxe keeps
/// them (a requester's retry timer firing, a NAK for a sequence error; the
/// responder's duplicate and out-of-sequence requests), printed; their sum.
/// The whole device's: every process on this host counts there.
std::uint64_t retransmissions(const device_counters& before, const char* who) {
    device_counters delta = read_device_counters(before.device, before.port).since(before);
    const char* names[] = {"completer_retry_err", "rcvd_seq_err", "duplicate_request", "out_of_seq_request"};
    std::uint64_t sum = 0;
    std::string each;
    for (const char* n : names) {
        sum += delta[n];
        each += std::string(each.empty() ? "" : ", ") + n + " " + std::to_string(delta[n]);
    }
    std::printf("%s: the device's counters (%s port %u) over the run: %s; sent_pkts %llu: %llu retransmission "
                "events\n",
                who, before.device.c_str(), unsigned(before.port), each.c_str(),
                (unsigned long long)delta["sent_pkts"], (unsigned long long)sum);
    return sum;
}

int traffic(const std::string& address, int seconds, bool until_told, bool expect_retransmissions) {
    builder b = make_builder();
    // Read where the device has counters; required only when asked for.
    std::optional<device_counters> device_before;
    try {
        device_before = read_device_counters(*b.pd()->device(), 1);
    } catch (const std::exception& e) {
        if (expect_retransmissions)
            throw;
        std::printf("fault_peer traffic: no device counters to read (%s)\n", e.what());
    }
    client_state cs;
    std::vector<connection> conns;
    std::vector<remote_mr> slot_regions;
    for (int i = 0; i < 4; ++i) {
        conns.push_back(connect_retrying(b, address, std::chrono::seconds(60)));
        slot_regions.push_back(sync_wait(conns.back().receive_remote_mr()));
    }
    auto pool = b.pool();
    constexpr std::size_t pairs = 8;
    local_mr mine = pool->allocate(pairs * slot_size);
    local_mr back = pool->allocate(pairs * slot_size);
    std::uint64_t adds_limit = 1u << 22;
    std::vector<std::uint32_t> seen(adds_limit, 0);
    std::vector<std::uint64_t> seqs(3, 0);
    auto began = clock_type::now();
    auto stopper = b.event_listener()->call_after(std::chrono::seconds(seconds), [&cs] { cs.stop = true; });
    // A whole run must end: a completion lost would leave a worker waiting.
    watchdog guard("traffic", std::chrono::seconds(seconds + 120));
    sync_wait([&]() -> task<void> {
        // The regions the agent is asked for: one for write/read slots,
        // one for the atomics (one word each).
        remote_mr rw = co_await conns[3].request_remote_mr(pairs * slot_size, 64, lease);
        remote_mr words = co_await conns[3].request_remote_mr(
            64, 8, lease, access_flags::remote_read | access_flags::remote_write | access_flags::remote_atomic);
        task_group workers;
        for (int i = 0; i < 2; ++i)
            workers.spawn(guarded(echo_worker(conns[i], pool, &cs, &seqs[i], ~0ull), &cs, "echo " + std::to_string(i)));
        workers.spawn(guarded(note_worker(conns[2], pool, slot_regions[2].all(), &cs), &cs, "write_with_imm"));
        for (std::size_t i = 0; i < pairs; ++i)
            workers.spawn(guarded(write_read_worker(conns[3], mine.slice(i * slot_size, slot_size),
                                                    back.slice(i * slot_size, slot_size),
                                                    rw.slice(i * slot_size, slot_size), i, &cs),
                                  &cs, "write/read " + std::to_string(i)));
        for (int i = 0; i < 4; ++i)
            workers.spawn(guarded(add_worker(conns[3], words.slice(0, 8), &seen, &cs), &cs, "fetch_add"));
        workers.spawn(guarded(swap_worker(conns[3], words.slice(8, 8), &cs), &cs, "compare_swap"));
        workers.spawn(guarded(agent_worker(conns[3], pool, &cs), &cs, "agent"));
        co_await workers.join();
        // fetch_add: the word holds the number made; each old value seen
        // once, but for as many adds as came back without their result.
        std::uint64_t made = co_await conns[3].fetch_add(words.slice(0, 8), 0);
        std::uint64_t never_seen = 0;
        for (std::uint64_t v = 0; v < std::min<std::uint64_t>(made, adds_limit); ++v) {
            if (seen[v] == 0)
                ++never_seen;
            else if (seen[v] != 1)
                cs.error("fetch_add: old value " + std::to_string(v) + " seen " + std::to_string(seen[v]) + " times");
        }
        if (never_seen != cs.adds_lost)
            cs.error("fetch_add: " + std::to_string(never_seen) + " old values never seen, but " +
                     std::to_string(cs.adds_lost.load()) + " adds reported their result lost");
        for (std::uint64_t v = made; v < adds_limit; ++v)
            if (seen[v] != 0)
                cs.error("fetch_add: old value " + std::to_string(v) + " seen, but only " + std::to_string(made) +
                         " were made");
        std::printf("fault_peer traffic: fetch_add made %llu, each old value seen exactly once: %s (%llu adds and "
                    "%llu compare_swaps reported their result lost by the device)\n",
                    (unsigned long long)made, cs.errors.empty() ? "yes" : "no",
                    (unsigned long long)cs.adds_lost.load(), (unsigned long long)cs.swaps_lost.load());
        if (cs.errors.empty()) {
            co_await say_goodbye(conns[0], pool, seqs[0]);
            co_await say_goodbye(conns[1], pool, seqs[1]);
            co_await say_goodbye(conns[2], pool, 0);
            co_await say_goodbye(conns[3], pool, 0);
        }
    }());
    double took = std::chrono::duration<double>(clock_type::now() - began).count();
    std::printf("fault_peer traffic: %llu completions in %.1f s (%llu echoes), %zu errors\n",
                (unsigned long long)cs.completions.load(), took, (unsigned long long)(seqs[0] + seqs[1]),
                cs.errors.size());
    if (device_before && retransmissions(*device_before, "fault_peer traffic") == 0 && expect_retransmissions)
        cs.errors.push_back("--expect-retransmissions: the device counted none (is the link lossy?)");
    if (until_told && cs.errors.empty() && !cs.told_to_stop)
        cs.errors.push_back("the server never said the run was over, within --seconds " + std::to_string(seconds));
    for (auto& e : cs.errors)
        std::printf("fault_peer traffic: ERROR %s\n", e.c_str());
    return cs.errors.empty() ? 0 : 1;
}

// ---------------------------------------------------------------- pressure

struct pressure_state {
    std::mutex mutex;
    clock_type::time_point last_success{};
    clock_type::time_point last_failure{};
    std::vector<std::string> failures;
    std::uint64_t successes = 0;
    /// The longest any failed operation waited, from its post to its
    /// failure: at least the retry time for the oldest operation pending
    /// when the peer fell silent.
    double longest_wait_ms = 0;

    void succeeded() {
        std::lock_guard lock(mutex);
        last_success = clock_type::now();
        ++successes;
    }
    void failed(const std::string& what, clock_type::time_point posted) {
        std::lock_guard lock(mutex);
        last_failure = clock_type::now();
        longest_wait_ms = std::max(longest_wait_ms, ms_between(posted, last_failure));
        failures.push_back(what);
    }
};

/// A write and a read back, over and over, until one fails.
task<void> pressure_op(connection conn, local_slice mine, local_slice back, remote_slice remote, std::uint64_t id,
                       pressure_state* ps) {
    auto posted = clock_type::now();
    try {
        for (std::uint64_t round = 0;; ++round) {
            std::uint64_t seed = (id << 32) | round;
            fill(mine.bytes(), seed);
            posted = clock_type::now();
            co_await conn.write(mine, remote);
            posted = clock_type::now();
            co_await conn.read(back, remote);
            if (long at = mismatch(back.bytes(), seed); at >= 0)
                fail("pressure read back " + std::to_string(id) + ": byte " + std::to_string(at) + " is wrong");
            ps->succeeded();
        }
    } catch (const std::exception& e) {
        ps->failed(e.what(), posted);
    }
}

/// Echoes, counted by the server (which injects its fault after so many).
task<void> pressure_echo(connection conn, std::shared_ptr<memory_pool> pool, pressure_state* ps) {
    client_state cs;
    std::uint64_t seq = 0;
    try {
        co_await echo_worker(conn, pool, &cs, &seq, ~0ull);
    } catch (const std::exception& e) {
        ps->failed(e.what(), clock_type::now());  // an echo waits on the server: not a measure of the retries
    }
}

/// What the metrics counted for the connection whose peer went, with `ops`
/// writes and reads in flight: each of them failed once, the device
/// completed the first with retry_exc_err (the peer stopped acknowledging)
/// and flushed the rest, and the queue pair's end counted once as a failed
/// completion. Returns 1 (and says why) if not.
int counted_as_failed(builder& b, connection& conn, int ops, const char* who) {
    metrics_snapshot m = b.metrics();
    auto it = std::find_if(m.connections.begin(), m.connections.end(), [&](const connection_metrics& c) {
        return c.qp_num == conn.qp()->qp_num() && c.role == "data";
    });
    if (it == m.connections.end()) {
        std::printf("%s: FAILED: the metrics list no data queue pair %u\n", who, conn.qp()->qp_num());
        return 1;
    }
    const connection_counters& c = it->counters;
    std::string statuses;
    for (std::size_t s = 0; s < completion_statuses; ++s)
        if (c.completions[s] != 0)
            statuses += std::string(statuses.empty() ? "" : ", ") + completion_status_name(s) + " " +
                        std::to_string(c.completions[s]);
    std::uint64_t failed = c[operation_kind::write].failed + c[operation_kind::read].failed;
    std::printf("%s: counted on the queue pair: %llu writes and reads failed; completions by status: %s; broken: %s "
                "(%s)\n",
                who, (unsigned long long)failed, statuses.c_str(), it->broken ? name(it->cause) : "no",
                it->broken_reason.c_str());
    int rc = 0;
    if (failed != std::uint64_t(ops)) {
        std::printf("%s: FAILED: counted %llu writes and reads failed, not the %d in flight\n", who,
                    (unsigned long long)failed, ops);
        rc = 1;
    }
    if (c.completions[IBV_WC_RETRY_EXC_ERR] != 1 || c.completions[IBV_WC_WR_FLUSH_ERR] == 0) {
        std::printf("%s: FAILED: not one retry_exc_err completion and then flushes\n", who);
        rc = 1;
    }
    if (!it->broken || it->cause != disconnect_cause::failed_completion) {
        std::printf("%s: FAILED: the queue pair's end is not counted as a failed completion\n", who);
        rc = 1;
    }
    return rc;
}

/// Keeps `ops` writes and reads in flight on a connection until it fails;
/// returns 0 if every one failed within `fail_within` of the last success,
/// each saying the peer stopped acknowledging.
int pressure_run(builder& b, connection conn, int ops, milliseconds fail_within, const char* who) {
    auto pool = b.pool();
    pressure_state ps;
    constexpr std::size_t op_size = 64;
    local_mr mine = pool->allocate(ops * op_size);
    local_mr back = pool->allocate(ops * op_size);
    {
        watchdog guard(std::string(who) + ": operations in flight, waiting for the peer's fault", std::chrono::seconds(240));
        sync_wait([&]() -> task<void> {
            remote_mr region = co_await conn.request_remote_mr(ops * op_size, 64, lease);
            task_group all;
            for (int i = 0; i < ops; ++i)
                all.spawn(pressure_op(conn, mine.slice(i * op_size, op_size), back.slice(i * op_size, op_size),
                                      region.slice(i * op_size, op_size), i, &ps));
            all.spawn(pressure_echo(conn, pool, &ps));
            co_await all.join();
        }());
    }
    int rc = counted_as_failed(b, conn, ops, who);
    double fail_ms = ms_between(ps.last_success, ps.last_failure);
    std::size_t say_so = 0;
    for (auto& f : ps.failures)
        if (f.find("stopped acknowledging") != std::string::npos)
            ++say_so;
    std::printf("%s: %llu operations succeeded; then all %zu in flight failed: the longest any waited from its post "
                "to its failure was %.0f ms (limit %lld ms), the last failed %.0f ms after the last success was "
                "handled; %zu of them say the peer stopped acknowledging\n",
                who, (unsigned long long)ps.successes, ps.failures.size(), ps.longest_wait_ms,
                static_cast<long long>(fail_within.count()), fail_ms, say_so);
    std::printf("%s: first error: %s\n", who, ps.failures.empty() ? "(none)" : ps.failures.front().c_str());
    std::printf("%s: last error: %s\n", who, ps.failures.empty() ? "(none)" : ps.failures.back().c_str());
    if (ps.successes == 0) {
        std::printf("%s: FAILED: nothing succeeded before the fault\n", who);
        rc = 1;
    }
    if (ps.failures.size() != std::size_t(ops) + 1) {
        std::printf("%s: FAILED: %zu failures for %d operations and the echo\n", who, ps.failures.size(), ops);
        rc = 1;
    }
    if (ps.longest_wait_ms > double(fail_within.count()) || fail_ms > double(fail_within.count())) {
        std::printf("%s: FAILED: took %.0f ms to fail, more than %lld ms\n", who,
                    std::max(ps.longest_wait_ms, fail_ms), static_cast<long long>(fail_within.count()));
        rc = 1;
    }
    if (say_so != ps.failures.size()) {
        for (auto& f : ps.failures)
            if (f.find("stopped acknowledging") == std::string::npos) {
                std::printf("%s: FAILED: an error that does not say the peer stopped acknowledging: %s\n", who,
                            f.c_str());
                break;
            }
        rc = 1;
    }
    std::fflush(stdout);
    return rc;
}

/// librdmacm and libibverbs open a device context on first use and keep it
/// for the life of the process (2 fds): take baselines after that.
void warm_up() {
    if (const char* here = std::getenv("RXE_VM_ADDR")) {
        builder b = make_builder();
        listener l = b.listen(std::string(here) + ":0");  // warm-up: its timeout does not matter
    }
}

int pressure(const std::string& address, int ops, milliseconds fail_within, bool reconnect) {
    warm_up();
    auto before = test::current_resources();
    auto before_fds = test::open_fd_targets();
    int rc = 0;
    {
        builder b = make_builder();
        test::process_resources with_old;
        {
            connection conn = connect_retrying(b, address, std::chrono::seconds(60));
            remote_mr slots_region = sync_wait(conn.receive_remote_mr());
            with_old = test::current_resources();
            std::printf("fault_peer pressure: connected to %s; holding %s\n", address.c_str(), with_old.to_string().c_str());
            std::fflush(stdout);
            rc = pressure_run(b, conn, ops, fail_within, "fault_peer pressure");
            sync_wait(conn.close());
        }
        if (reconnect) {
            auto began = clock_type::now();
            connection conn = connect_retrying(b, address, std::chrono::seconds(90));
            std::printf("fault_peer pressure: connected again after %.0f ms\n", ms_between(began, clock_type::now()));
            remote_mr slots_region = sync_wait(conn.receive_remote_mr());
            auto with_new = test::current_resources();
            client_state cs;
            std::uint64_t seq = 0;
            {
                watchdog guard("fault_peer pressure: traffic on the new connection", std::chrono::seconds(120));
                sync_wait(guarded(echo_worker(conn, b.pool(), &cs, &seq, 200), &cs, "echo on the new connection"));
                if (cs.errors.empty())
                    sync_wait(guarded(say_goodbye(conn, b.pool(), seq), &cs, "goodbye"));
            }
            for (auto& e : cs.errors) {
                std::printf("fault_peer pressure: FAILED: %s\n", e.c_str());
                rc = 1;
            }
            std::printf("fault_peer pressure: %llu echoes checked on the new connection; it holds %s (the old one held "
                        "%s)\n",
                        (unsigned long long)seq, with_new.to_string().c_str(), with_old.to_string().c_str());
            if (!(with_new == with_old)) {
                std::printf("fault_peer pressure: FAILED: the old connection left something behind\n");
                rc = 1;
            }
        }
    }
    auto after = test::current_resources();
    std::printf("fault_peer pressure: before the builder: %s; after it: %s\n", before.to_string().c_str(),
                after.to_string().c_str());
    if (!(after == before)) {
        std::printf("fault_peer pressure: FAILED: resources were not all given back (fds before: %s; after: %s)\n",
                    before_fds.c_str(), test::open_fd_targets().c_str());
        rc = 1;
    }
    return rc;
}

// ---------------------------------------------------------------- serve

struct serve_options {
    std::string address;
    int clients = 1;
    int may_fail = 0;
    std::uint64_t fault_after = 0;
    std::string fault;
    std::string fault_before_reply;
    std::string pressure_to;
    int ops = 1000;
    milliseconds fail_within{5000};
    std::chrono::seconds idle{0};
};

task<void> accept_and_serve(listener& l, server_state* st, int clients) {
    task_group served;
    for (int i = 0; i < clients; ++i) {
        connection conn = co_await l.accept();
        served.spawn(serve_one(std::move(conn), st));
    }
    co_await served.join();
}

int serve(const serve_options& o) {
    builder b = make_builder();
    server_state st;
    st.pool = b.pool();
    st.fault_after = o.fault_after;
    st.fault_command = o.fault;
    st.fault_before_reply = o.fault_before_reply;
    st.idle = o.idle;
    listener l = b.listen(o.address);
    std::printf("fault_peer serve: listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    int rc = 0;
    std::thread pressure_thread;
    if (!o.pressure_to.empty()) {
        pressure_thread = std::thread([&] {
            // Under pressure only once a client is being served: it must
            // go on being served through the other peer's failure.
            while (st.started < o.clients)
                std::this_thread::sleep_for(milliseconds(50));  // polling the count, bounded by the watchdog
            auto before = test::current_resources();
            try {
                builder other = make_builder();
                connection conn = connect_retrying(other, o.pressure_to, std::chrono::seconds(90));
                remote_mr slots_region = sync_wait(conn.receive_remote_mr());
                if (pressure_run(other, conn, o.ops, o.fail_within, "fault_peer serve (pressure)") != 0)
                    rc = 1;
                sync_wait(conn.close());
            } catch (const std::exception& e) {
                // The connection to the host that is to fail, failing
                // before its operations were in flight (the peer not yet
                // powered off): a failure of the test, said as one, not a
                // std::terminate from this thread.
                std::printf("fault_peer serve (pressure): FAILED: the connection to %s failed before its fault: %s\n",
                            o.pressure_to.c_str(), e.what());
                rc = 1;
            }
            auto after = test::current_resources();
            int serving = st.started - st.finished;
            std::printf("fault_peer serve (pressure): resources before %s; after %s; still serving %d client(s)\n",
                        before.to_string().c_str(), after.to_string().c_str(), serving);
            // Memory regions are left out here: the clients still being
            // served have the agent register and free regions all along.
            before.mr = after.mr = 0;
            if (!(after == before)) {
                std::printf("fault_peer serve (pressure): FAILED: the failed connection left resources behind\n");
                rc = 1;
            }
            if (serving < 1) {
                std::printf("fault_peer serve (pressure): FAILED: no client was still being served\n");
                rc = 1;
            }
            std::fflush(stdout);
            st.wind_down = true;  // the clients may stop now
        });
    }
    {
        watchdog guard("fault_peer serve", std::chrono::seconds(400));
        sync_wait(accept_and_serve(l, &st, o.clients));
        if (pressure_thread.joinable())
            pressure_thread.join();
    }
    if (st.fault_thread.joinable())
        st.fault_thread.join();
    std::printf("fault_peer serve: %d connections, %d failed (at most %d may), %llu messages, %llu write_with_imm\n",
                st.finished.load(), st.failed.load(), o.may_fail, (unsigned long long)st.messages.load(),
                (unsigned long long)st.notes.load());
    if (st.failed > o.may_fail)
        rc = 1;
    return rc;
}

// ---------------------------------------------------------------- soak

struct sample {
    double at;
    long resident_kib;
    long huge_kib;
    int fds;
};

task<void> accept_n(listener& l, std::vector<connection>* out, int n) {
    for (int i = 0; i < n; ++i)
        out->push_back(co_await l.accept());
}

task<void> connect_n(builder& b, std::string address, std::vector<connection>* out, int n) {
    for (int i = 0; i < n; ++i)
        out->push_back(co_await b.connect(address));
}

int soak(const std::string& address, int connections, int depth, int seconds) {
    builder b = make_builder();
    listener l = b.listen(address);
    std::vector<connection> accepted, clients;
    auto began = clock_type::now();
    watchdog guard("fault_peer soak", std::chrono::seconds(seconds + 240));
    sync_wait(when_all(accept_n(l, &accepted, connections), connect_n(b, l.address(), &clients, connections)));
    std::printf("fault_peer soak: %d connections up in %.1f s\n", connections,
                std::chrono::duration<double>(clock_type::now() - began).count());
    std::fflush(stdout);
    constexpr std::size_t op_size = 64;
    auto pool = b.pool();
    std::vector<remote_mr> regions;
    std::vector<local_mr> mine, back;
    for (auto& c : clients) {
        regions.push_back(sync_wait(c.request_remote_mr(depth * op_size, 64, lease)));
        mine.push_back(pool->allocate(depth * op_size));
        back.push_back(pool->allocate(depth * op_size));
    }
    std::printf("fault_peer soak: %zu regions granted; starting %d x %d workers\n", regions.size(), connections, depth);
    std::fflush(stdout);
    client_state cs;
    std::vector<sample> samples;
    std::atomic<bool> sampling{true};
    auto start = clock_type::now();
    std::thread sampler([&] {
        for (int s = 0; s <= seconds && sampling; ++s) {
            std::this_thread::sleep_until(start + std::chrono::seconds(s));  // a sampling period, not a readiness wait
            samples.push_back({std::chrono::duration<double>(clock_type::now() - start).count(), test::resident_kib(),
                               test::anon_huge_kib(), test::open_fd_count()});
            if (s % 5 == 0) {
                std::printf("fault_peer soak: t=%d s, %llu completions\n", s, (unsigned long long)cs.completions.load());
                std::fflush(stdout);
            }
        }
    });
    auto stopper = b.event_listener()->call_after(std::chrono::seconds(seconds), [&cs] { cs.stop = true; });
    std::uint64_t workers = 0;
    sync_wait([&]() -> task<void> {
        task_group all;
        for (std::size_t c = 0; c < clients.size(); ++c)
            for (int i = 0; i < depth; ++i) {
                ++workers;
                all.spawn(guarded(write_read_worker(clients[c], mine[c].slice(i * op_size, op_size),
                                                    back[c].slice(i * op_size, op_size),
                                                    regions[c].slice(i * op_size, op_size), (c << 16) | i, &cs),
                                  &cs, "connection " + std::to_string(c) + " worker " + std::to_string(i)));
            }
        co_await all.join();
    }());
    double took = std::chrono::duration<double>(clock_type::now() - start).count();
    sampling = false;
    sampler.join();
    int rc = cs.errors.empty() ? 0 : 1;
    for (auto& e : cs.errors)
        std::printf("fault_peer soak: ERROR %s\n", e.c_str());
    std::printf("fault_peer soak: %d connections x %d in flight: %llu completions in %.1f s (%.0f/s), all %llu "
                "workers done, every read matched its write\n",
                connections, depth, (unsigned long long)cs.completions.load(), took, cs.completions / took,
                (unsigned long long)workers);
    for (auto& s : samples)
        std::printf("fault_peer soak: t=%4.1f s resident %ld KiB (%ld KiB of it huge pages), %d fds\n", s.at,
                    s.resident_kib, s.huge_kib, s.fds);
    if (samples.size() < 6) {
        std::printf("fault_peer soak: FAILED: only %zu samples\n", samples.size());
        return 1;
    }
    long low = samples[5].resident_kib, high = low;
    for (std::size_t i = 5; i < samples.size(); ++i) {
        high = std::max(high, samples[i].resident_kib);
        if (samples[i].fds != samples[5].fds) {
            std::printf("fault_peer soak: FAILED: fds went from %d to %d\n", samples[5].fds, samples[i].fds);
            rc = 1;
        }
    }
    std::printf("fault_peer soak: resident memory from second 5 on: %ld KiB to at most %ld KiB (+%ld KiB)\n", low, high,
                high - low);
    if (high - low > 1024) {
        std::printf("fault_peer soak: FAILED: resident memory grew by more than 1 MiB after second 5\n");
        rc = 1;
    }
    return rc;
}

long number(const char* flag, const char* text, long low, long high) {
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < low || v > high)
        throw std::invalid_argument(std::string(flag) + " wants a number in " + std::to_string(low) + ".." +
                                    std::to_string(high) + ", not '" + text + "'");
    return v;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 3) {
        std::fprintf(stderr, "usage: fault_peer serve|traffic|pressure|soak ADDR:PORT [options] (see the source's header)\n");
        return 2;
    }
    std::string mode = argv[1];
    std::string address = argv[2];
    serve_options so;
    so.address = address;
    int seconds = 10, connections = 64, depth = 256;
    bool reconnect = false, until_told = false, expect_retransmissions = false;
    for (int i = 3; i < argc; ++i) {
        std::string flag = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc)
                throw std::invalid_argument(flag + " needs a value");
            return argv[++i];
        };
        if (flag == "--clients") so.clients = int(number("--clients", value(), 1, 1000));
        else if (flag == "--may-fail") so.may_fail = int(number("--may-fail", value(), 0, 1000));
        else if (flag == "--fault-after") so.fault_after = std::uint64_t(number("--fault-after", value(), 1, 1L << 40));
        else if (flag == "--fault") so.fault = value();
        else if (flag == "--fault-before-reply") so.fault_before_reply = value();
        else if (flag == "--pressure-to") so.pressure_to = value();
        else if (flag == "--ops") so.ops = int(number("--ops", value(), 1, 100000));
        else if (flag == "--fail-within") so.fail_within = milliseconds(number("--fail-within", value(), 1, 600000));
        else if (flag == "--idle") so.idle = std::chrono::seconds(number("--idle", value(), 1, 3600));
        else if (flag == "--seconds") seconds = int(number("--seconds", value(), 1, 3600));
        else if (flag == "--connections") connections = int(number("--connections", value(), 1, 1024));
        else if (flag == "--depth") depth = int(number("--depth", value(), 1, 65536));
        else if (flag == "--reconnect") reconnect = true;
        else if (flag == "--until-told") until_told = true;
        else if (flag == "--expect-retransmissions") expect_retransmissions = true;
        else if (flag == "--ack-timeout") ack_timeout = std::uint8_t(number("--ack-timeout", value(), 0, 31));
        else throw std::invalid_argument("unknown option '" + flag + "'");
    }
    ::signal(SIGPIPE, SIG_IGN);
    if (mode == "serve")
        return serve(so);
    if (mode == "traffic")
        return traffic(address, seconds, until_told, expect_retransmissions);
    if (mode == "pressure")
        return pressure(address, so.ops, so.fail_within, reconnect);
    if (mode == "soak")
        return soak(address, connections, depth, seconds);
    std::fprintf(stderr, "fault_peer: unknown mode '%s'\n", mode.c_str());
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "fault_peer: %s\n", e.what());
    return 1;
}
