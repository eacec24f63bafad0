#pragma once
// The other half of perftest's `ib_send_bw -R`, on top of cordma's plain
// connections (builder::agent(false)): cordma plays ib_send_bw's client or
// server. Written from reading perftest's source (github linux-rdma/perftest,
// tag v4.5-0.17, Debian 12's perftest 4.5+0.17-1, "Version: 6.06"):
// src/send_bw.c main(), src/perftest_communication.c.
//
// With -R perftest opens two rdma_cm RC connections to the same port, one
// after the other, neither with private data:
//
// 1. "comm": one QP that carries perftest's own conversation. Each side posts
//    one receive of 56 bytes (sizeof(struct pingpong_dest)) before it
//    connects or accepts, and re-posts it after each message. Every step of
//    the conversation ("xchg", "hand shake") is one SEND each way: the client
//    sends and then receives, the server receives and then sends.
// 2. "data": the test's QP (one, without -q).
//
// The conversation of `ib_send_bw -R -s SIZE -n ITERS` (RC, one QP, not
// bidirectional), in order:
//
//     comm  version, 16 bytes of text ("6.06\0...")      exchange_versions
//     comm  page size, int32 big-endian                   check_sys_data
//     comm  cache line size, int32 big-endian
//     comm  MTU code as text, 2 bytes ("5\0" = 4096)      check_mtu
//     comm  pingpong_dest, all zeros                      create_rdma_cm_connection,
//     data  rdma_cm connect / accept                        the client connects
//     comm  pingpong_dest, all zeros                        ... and both sync again
//     comm  pingpong_dest x3, now the data QP's           send_set_up_connection, then
//                                                           three hand shakes
//     comm  pingpong_dest                                 the server has posted its
//                                                           receives; the client sends next
//     data  ITERS SENDs of SIZE bytes, client to server   run_iter_bw / _server
//     comm  pingpong_dest                                 ctx_close_connection
//     then each side disconnects and exits.
//
// pingpong_dest as it crosses (perftest builds with HAVE_ENDIAN): lid,
// out_reads, qpn, psn, rkey as 32-bit big-endian; 4 bytes of padding; vaddr
// as 64-bit big-endian; the GID's 16 raw bytes; srqn and gid_index as
// 32-bit big-endian: 56 bytes. Perftest reads the peer's only to print it
// (rdma_cm set the QPs up), so what cordma sends need only be well formed;
// what it receives is checked: the QPN in the data QP's pingpong_dest must
// be the one rdma_cm connected cordma's data QP to.
//
// The data is perftest's random bytes, which it never checks; so the test
// checks the count and length of the messages, and perftest's own report.

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stop_token>
#include <stdexcept>
#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

namespace cordma::test {

struct perftest_dest {
    std::uint32_t lid = 0;
    std::uint32_t out_reads = 0;
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;
    std::uint32_t rkey = 0;
    std::uint64_t vaddr = 0;
    ibv_gid gid{};
    std::uint32_t srqn = 0;
    std::uint32_t gid_index = 0;
};

inline constexpr std::size_t perftest_dest_size = 56;

namespace perftest_detail {

inline void put32(std::byte* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<std::byte>(v >> (24 - 8 * i));
}
inline std::uint32_t get32(const std::byte* p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v = v << 8 | std::to_integer<std::uint32_t>(p[i]);
    return v;
}

}  // namespace perftest_detail

inline std::array<std::byte, perftest_dest_size> encode_perftest_dest(const perftest_dest& d) {
    using namespace perftest_detail;
    std::array<std::byte, perftest_dest_size> out{};
    put32(&out[0], d.lid);
    put32(&out[4], d.out_reads);
    put32(&out[8], d.qpn);
    put32(&out[12], d.psn);
    put32(&out[16], d.rkey);
    put32(&out[24], static_cast<std::uint32_t>(d.vaddr >> 32));
    put32(&out[28], static_cast<std::uint32_t>(d.vaddr));
    std::memcpy(&out[32], d.gid.raw, 16);
    put32(&out[48], d.srqn);
    put32(&out[52], d.gid_index);
    return out;
}

inline perftest_dest decode_perftest_dest(std::span<const std::byte> in) {
    using namespace perftest_detail;
    if (in.size() != perftest_dest_size)
        throw std::runtime_error("perftest sent " + std::to_string(in.size()) + " bytes where its pingpong_dest (" +
                                 std::to_string(perftest_dest_size) + ") belongs: the conversation is out of step");
    perftest_dest d;
    d.lid = get32(&in[0]);
    d.out_reads = get32(&in[4]);
    d.qpn = get32(&in[8]);
    d.psn = get32(&in[12]);
    d.rkey = get32(&in[16]);
    d.vaddr = std::uint64_t{get32(&in[24])} << 32 | get32(&in[28]);
    std::memcpy(d.gid.raw, &in[32], 16);
    d.srqn = get32(&in[48]);
    d.gid_index = get32(&in[52]);
    return d;
}

/// What cordma saw of a run, for the test to check.
struct perftest_run {
    std::string peer_version;               // "6.06"
    std::uint32_t peer_page_size = 0;
    std::uint32_t peer_cache_line = 0;
    std::string peer_mtu;                   // "5"
    std::vector<perftest_dest> peer_dests;  // every pingpong_dest it sent, in order
    std::uint32_t data_dest_qpn = 0;        // whom rdma_cm connected cordma's data QP to
    std::vector<std::size_t> received;      // server role: each data message's length
    std::size_t sent = 0;                   // client role: data messages sent
};

/// The comm connection's conversation, either role.
class perftest_comm {
public:
    perftest_comm(connection conn, std::shared_ptr<memory_pool> pool, bool client)
        : conn_(std::move(conn)), in_(pool->allocate(64)), out_(pool->allocate(64)), client_(client) {}

    connection& conn() { return conn_; }

    /// One step: the client sends then receives, the server receives then
    /// sends; cordma's receive is posted before its send either way, so the
    /// peer's answer never finds it unready.
    task<std::vector<std::byte>> exchange(std::span<const std::byte> mine, const char* step) {
        if (mine.size() > perftest_dest_size)
            throw std::logic_error(std::string("perftest step ") + step + ": more than its 56-byte receive");
        std::memcpy(out_.data(), mine.data(), mine.size());
        recv_result got;
        if (client_) {
            auto [r, sent] = co_await when_all(conn_.recv(in_.all()), conn_.send(out_.slice(0, mine.size())));
            (void)sent;
            got = r;
        } else {
            got = co_await conn_.recv(in_.all());
            co_await conn_.send(out_.slice(0, mine.size()));
        }
        const auto* bytes = reinterpret_cast<const std::byte*>(in_.data());
        co_return std::vector<std::byte>(bytes, bytes + got.length);
    }

    task<perftest_dest> hand_shake(const perftest_dest& mine, const char* step) {
        auto bytes = encode_perftest_dest(mine);
        co_return decode_perftest_dest(co_await exchange(bytes, step));
    }

    /// Everything before the data connection: versions, page and cache line
    /// sizes, MTU, and the first hand shake.
    task<void> opening(perftest_run& run) {
        char version[16] = "6.06";
        auto v = co_await exchange(std::as_bytes(std::span(version)), "exchange_versions");
        run.peer_version.assign(reinterpret_cast<const char*>(v.data()), strnlen(reinterpret_cast<const char*>(v.data()), v.size()));
        std::array<std::byte, 4> word{};
        perftest_detail::put32(word.data(), 4096);
        auto page = co_await exchange(word, "check_sys_data (page size)");
        perftest_detail::put32(word.data(), 64);
        auto line = co_await exchange(word, "check_sys_data (cache line)");
        if (page.size() != 4 || line.size() != 4)
            throw std::runtime_error("perftest's check_sys_data sent " + std::to_string(page.size()) + " and " +
                                     std::to_string(line.size()) + " bytes, not 4 and 4");
        run.peer_page_size = perftest_detail::get32(page.data());
        run.peer_cache_line = perftest_detail::get32(line.data());
        char mtu[2] = {'5', '\0'};
        auto m = co_await exchange(std::as_bytes(std::span(mtu)), "check_mtu");
        run.peer_mtu.assign(reinterpret_cast<const char*>(m.data()), strnlen(reinterpret_cast<const char*>(m.data()), m.size()));
        run.peer_dests.push_back(co_await hand_shake({}, "before the data connection"));
    }

    /// Everything between the data connection and the data: one hand shake
    /// of zeros, then three and one more of the data QP's own.
    task<void> middle(perftest_run& run, const connection& data, std::shared_ptr<memory_pool> pool,
                      std::size_t size, std::size_t iters, task_group* receives, std::vector<std::size_t>* lengths) {
        run.peer_dests.push_back(co_await hand_shake({}, "after the data connection"));
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        if (ibv_query_qp(data.qp()->native_handle(), &attr, IBV_QP_DEST_QPN | IBV_QP_SQ_PSN, &init) != 0)
            throw std::runtime_error("ibv_query_qp on the data QP failed");
        run.data_dest_qpn = attr.dest_qp_num;
        perftest_dest mine;
        mine.qpn = data.qp()->qp_num();
        mine.psn = attr.sq_psn;
        mine.out_reads = 1;
        for (const char* step : {"send_set_up_connection", "shaking hands", "remote side"})
            run.peer_dests.push_back(co_await hand_shake(mine, step));
        if (receives != nullptr) {
            // The server's receives go up before its last hand shake: the
            // client sends as soon as it has the answer.
            local_mr buffers = pool->allocate(size * iters);
            lengths->assign(iters, 0);
            for (std::size_t i = 0; i < iters; ++i)
                receives->spawn([](connection c, local_slice into, std::size_t* out) -> task<void> {
                    auto got = co_await c.recv(into);
                    *out = got.length;
                }(data, buffers.slice(i * size, size), &(*lengths)[i]));
        }
        run.peer_dests.push_back(co_await hand_shake(mine, "ready to run"));
    }

    task<void> closing(perftest_run& run) { run.peer_dests.push_back(co_await hand_shake({}, "ctx_close_connection")); }

private:
    connection conn_;
    local_mr in_;
    local_mr out_;
    bool client_;
};

/// cordma as ib_send_bw's client, against `ib_send_bw -R -s SIZE -n ITERS`
/// listening at `address`. `b` must have builder::agent(false); its connect
/// retries until perftest listens.
inline task<perftest_run> run_send_bw_client(builder& b, std::string address, std::size_t size, std::size_t iters) {
    perftest_run run;
    auto pool = b.pool();
    perftest_comm comm(co_await b.connect(address), pool, true);
    co_await comm.opening(run);
    connection data = co_await b.connect(address);
    co_await comm.middle(run, data, pool, size, iters, nullptr, nullptr);
    local_mr payload = pool->allocate(size);
    for (std::size_t i = 0; i < size; ++i)
        payload.data()[i] = static_cast<std::byte>(i * 7 + 1);
    for (std::size_t i = 0; i < iters; ++i) {
        co_await data.send(payload.all());
        ++run.sent;
    }
    co_await comm.closing(run);
    co_await data.close();
    co_await comm.conn().close();
    co_return run;
}

/// cordma as ib_send_bw's server: `ib_send_bw -R -s SIZE -n ITERS ADDRESS`
/// connects to `l` (builder::agent(false)) twice; `accept_limit` bounds
/// the waits for it.
inline task<perftest_run> run_send_bw_server(listener& l, std::shared_ptr<memory_pool> pool, std::size_t size,
                                             std::size_t iters, std::stop_token accept_limit = {}) {
    perftest_run run;
    perftest_comm comm(co_await l.accept(accept_limit), pool, false);
    co_await comm.opening(run);
    connection data = co_await l.accept(accept_limit);
    task_group receives;
    co_await comm.middle(run, data, pool, size, iters, &receives, &run.received);
    co_await receives.join();
    co_await comm.closing(run);
    co_await data.close();
    co_await comm.conn().close();
    co_return run;
}

}  // namespace cordma::test
