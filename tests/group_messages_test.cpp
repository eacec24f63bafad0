// A group's point-to-point messages (group::send, recv, recv_any and their
// started forms) over rxe, ranks as threads of this process: order per
// source and tag, tags kept apart, any size, collectives between messages
// nobody has taken yet, refusals that lose nothing, deadlines that leave
// the group whole, and a peer that leaves named.

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/group.hpp>
#include <cordma/pending.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/trace.hpp>

#include <atomic>

#include "support/group_ranks.hpp"

using namespace cordma;
using namespace std::chrono_literals;
using test::host_list;
using test::rank_builder;
using test::require_none;
using test::run_ranks;

namespace {

group form(const std::vector<std::string>& hosts, int r) {
    builder b = rank_builder();
    group_options o = group_options::from_hosts(hosts, r);
    o.formation_timeout = 30s;
    o.operation_timeout = 30s;
    return sync_wait(group::form(b, o));
}

/// Message `i` of flow `tag` from `from`: its length alternates between
/// inline (100 B) and read-from-the-sender (20,000 B) sizes, and its bytes
/// name it.
std::size_t length_of(std::uint32_t tag, int i) { return (i + static_cast<int>(tag)) % 3 == 0 ? 20000 : 100; }

std::byte byte_of(int from, std::uint32_t tag, int i, std::size_t k) {
    return static_cast<std::byte>((from * 59 + static_cast<int>(tag) * 31 + i * 7 + static_cast<int>(k)) & 0xff);
}

void fill(local_slice s, int from, std::uint32_t tag, int i) {
    for (std::size_t k = 0; k < s.size(); ++k)
        s.data()[k] = byte_of(from, tag, i, k);
}

/// Message i of (from, tag)'s trace id: its numbers in the id's bytes; every
/// third untraced.
trace_id trace_of(int from, std::uint32_t tag, int i) {
    if (i % 3 == 2)
        return {};
    std::array<std::byte, 16> bytes{};
    bytes[0] = std::byte(from + 1);
    bytes[1] = std::byte(tag);
    bytes[2] = std::byte(i);
    bytes[15] = std::byte{0x5a};
    return trace_id(bytes);
}

/// "" if `got` (m bytes in `in`) is message i of (from, tag), else what is wrong.
std::string check(const message_info& m, const local_mr& in, int from, std::uint32_t tag, int i) {
    if (m.trace != trace_of(from, tag, i))
        return "message " + std::to_string(i) + " of tag " + std::to_string(tag) + " from rank " +
               std::to_string(from) + " has trace id '" + m.trace.to_string() + "', expected '" +
               trace_of(from, tag, i).to_string() + "'";
    if (m.source != from || m.tag != tag)
        return "message " + std::to_string(i) + " came from rank " + std::to_string(m.source) + " tag " +
               std::to_string(m.tag) + ", expected rank " + std::to_string(from) + " tag " + std::to_string(tag);
    if (m.size != length_of(tag, i))
        return "message " + std::to_string(i) + " of tag " + std::to_string(tag) + " has " + std::to_string(m.size) +
               " bytes, expected " + std::to_string(length_of(tag, i));
    for (std::size_t k = 0; k < m.size; ++k)
        if (in.data()[k] != byte_of(from, tag, i, k))
            return "byte " + std::to_string(k) + " of message " + std::to_string(i) + " (tag " +
                   std::to_string(tag) + ") from rank " + std::to_string(from) + " is wrong";
    return {};
}

constexpr int per_flow = 20;

const trace_id barrier_trace = *trace_id::parse("0af7651916cd43dd8448eb211c80319c");
group_call barrier_call() {
    group_call c;
    c.trace = barrier_trace;
    return c;
}

/// Collective spans heard (span hook): opened, and closed without error,
/// with barrier_trace; anything else heard.
std::atomic<int> collective_opened{0}, collective_closed_ok{0}, other_spans{0};
std::uint64_t on_open(void*, const span_info& s) {
    if (s.kind == span_kind::collective && s.trace == barrier_trace && s.name == "barrier")
        ++collective_opened;
    else
        ++other_spans;
    return 7;
}
void on_close(void*, std::uint64_t handle, const span_info& s, const std::error_code& outcome) {
    if (handle == 7 && s.kind == span_kind::collective && !outcome)
        ++collective_closed_ok;
    else
        ++other_spans;
}

/// Starts every message of two flows (tags 7 and 8) to rank 0 at once.
task<void> send_flows(group g) {
    std::vector<local_mr> buffers;
    std::vector<pending<void>> sent;
    for (std::uint32_t tag : {7u, 8u})
        for (int i = 0; i < per_flow; ++i) {
            buffers.push_back(g.allocate(length_of(tag, i)));
            fill(buffers.back(), g.rank(), tag, i);
            group_call call;
            call.trace = trace_of(g.rank(), tag, i);
            sent.push_back(g.start_send(0, buffers.back(), tag, call));
        }
    // A collective while rank 0 has taken none of them yet (traced).
    co_await g.barrier(barrier_call());
    for (auto& s : sent)
        co_await s.wait();
}

/// Rank 0: rank 1's tag 8 before its tag 7 (each in order), then rank 2's
/// messages as they come, whatever their tag.
task<std::vector<std::string>> take_flows(group g) {
    std::vector<std::string> problems;
    co_await g.barrier(barrier_call());
    local_mr in = g.allocate(20000);
    for (std::uint32_t tag : {8u, 7u})
        for (int i = 0; i < per_flow; ++i) {
            message_info m = co_await g.recv(1, in, tag);
            if (auto p = check(m, in, 1, tag, i); !p.empty())
                problems.push_back("rank 1: " + p);
        }
    int next[2] = {0, 0};
    for (int k = 0; k < 2 * per_flow; ++k) {
        message_info m = co_await g.recv_any(in);
        int& i = next[m.tag == 8 ? 1 : 0];
        if (auto p = check(m, in, 2, m.tag, i++); !p.empty())
            problems.push_back("recv_any: " + p);
    }
    co_return problems;
}

}  // namespace

TEST_CASE("messages arrive in order per source and tag, tags apart, and collectives pass them", "[group]") {
    // 40 messages from each of ranks 1 and 2, every one started before rank
    // 0 takes any, with a barrier between: rank 0 keeps them aside (copies
    // of the small ones, the announcements of the large ones) and the
    // barrier is not held up behind them.
    // Each message carries its sender's trace id (one in three none), to
    // rank 0's message_info, whichever way it came (inline, read from the
    // sender, kept aside); the traced barrier opens one span per rank.
    auto hosts = host_list(3);
    std::vector<std::string> problems;
    set_span_hook({&on_open, &on_close, nullptr});
    struct unhook {
        ~unhook() { set_span_hook({}); }
    } unhooking;
    auto failures = run_ranks(3, [&](int r) {
        group g = form(hosts, r);
        if (r == 0)
            problems = sync_wait(take_flows(g));
        else
            sync_wait(send_flows(g));
        sync_wait(g.barrier());
        sync_wait(g.close());
    });
    require_none(failures);
    for (const auto& p : problems)
        FAIL_CHECK(p);
    CHECK(problems.empty());
    CHECK(collective_opened == 3);
    CHECK(collective_closed_ok == 3);
    CHECK(other_spans == 0);  // untraced calls (the closing barrier, the sends' frames) open none
}

TEST_CASE("a recv too small or out of time takes nothing, and the group goes on", "[group]") {
    auto hosts = host_list(2);
    std::string too_small, timed_out, bad_rank, bad_tag;
    std::vector<std::string> problems;
    auto failures = run_ranks(2, [&](int r) {
        group g = form(hosts, r);
        local_mr buf = g.allocate(20000);
        if (r == 1) {
            fill(buf.slice(0, 1000), 1, 5, 0);
            sync_wait(g.send(0, buf.slice(0, 1000), 5));
            fill(buf, 1, 6, 1);
            sync_wait(g.send(0, buf, 6));  // read by rank 0 after its refusals
            sync_wait(g.barrier());
            fill(buf.slice(0, 64), 1, 9, 2);
            sync_wait(g.send(0, buf.slice(0, 64), 9));
        } else {
            try {
                sync_wait(g.send(0, buf.slice(0, 8)));
            } catch (const std::out_of_range& e) {
                bad_rank = e.what();
            }
            try {
                sync_wait(g.send(1, buf.slice(0, 8), group::any_tag));
            } catch (const std::invalid_argument& e) {
                bad_tag = e.what();
            }
            try {
                sync_wait(g.recv(1, buf.slice(0, 100), 5));
            } catch (const group_error& e) {
                CHECK(e.code() == std::errc::message_size);
                too_small = e.what();
            }
            // The refused message is still there, and so is the large one.
            message_info m = sync_wait(g.recv(1, buf.slice(0, 2000), 5));
            if (m.size != 1000 || buf.data()[999] != byte_of(1, 5, 0, 999))
                problems.push_back("the refused message came back as " + std::to_string(m.size) + " bytes");
            try {
                sync_wait(g.recv(1, buf.slice(0, 100), 6));  // 20,000 bytes waiting: refused too
            } catch (const group_error& e) {
                CHECK(e.code() == std::errc::message_size);
            }
            m = sync_wait(g.recv(1, buf, 6));
            if (m.size != 20000 || buf.data()[19999] != byte_of(1, 6, 1, 19999))
                problems.push_back("the large message came back as " + std::to_string(m.size) + " bytes");
            auto started = std::chrono::steady_clock::now();
            try {
                sync_wait(g.recv(1, buf, 9, group_call{300ms, {}}));
            } catch (const group_error& e) {
                CHECK(e.code() == std::errc::timed_out);
                timed_out = e.what();
            }
            CHECK(std::chrono::steady_clock::now() - started < 5s);
            sync_wait(g.barrier());  // the group is whole
            m = sync_wait(g.recv(1, buf, 9));
            if (m.size != 64 || m.tag != 9 || buf.data()[63] != byte_of(1, 9, 2, 63))
                problems.push_back("the message after the timeout came as " + std::to_string(m.size) + " bytes");
        }
        sync_wait(g.barrier());
        sync_wait(g.close());
    });
    require_none(failures);
    for (const auto& p : problems)
        FAIL_CHECK(p);
    CHECK(bad_rank.find("dest is rank 0") != std::string::npos);
    CHECK(bad_tag.find("any_tag") != std::string::npos);
    CHECK(too_small.find("a message of 1000 bytes from rank 1") != std::string::npos);
    CHECK(too_small.find("100-byte buffer") != std::string::npos);
    CHECK(timed_out.find("recv from rank 1") != std::string::npos);
    CHECK(timed_out.find("timed out after 300 ms") != std::string::npos);
    CHECK(timed_out.find("nothing was taken") != std::string::npos);
}

TEST_CASE("a recv from a rank that leaves fails at once, naming it", "[group]") {
    auto hosts = host_list(2);
    std::string error;
    std::chrono::steady_clock::duration waited{};
    auto failures = run_ranks(2, [&](int r) {
        group g = form(hosts, r);
        sync_wait(g.barrier());
        if (r == 1) {
            sync_wait(g.close());
            return;
        }
        local_mr buf = g.allocate(64);
        auto started = std::chrono::steady_clock::now();
        try {
            sync_wait(g.recv(1, buf));
        } catch (const group_error& e) {
            error = e.what();
            CHECK(e.code() == std::errc::connection_aborted);
            CHECK(e.ranks() == std::vector<int>{1});
        }
        waited = std::chrono::steady_clock::now() - started;
        sync_wait(g.close());
    });
    require_none(failures);
    CHECK(error.find("rank 1") != std::string::npos);
    CHECK(error.find("went away") != std::string::npos);
    CHECK(waited < 10s);
}
