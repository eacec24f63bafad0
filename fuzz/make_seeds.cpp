// Writes the seed corpora of the fuzz targets agent_protocol, link_wire,
// endpoint_message, cm_hello, rendezvous and rpc_wire
// (fuzz/corpus/TARGET/NAME): one valid input of each kind, made with the
// library's own encoders, so that libFuzzer starts from inputs its
// decoders accept and every rule is a mutation or two away. The seeds are committed; run this again only
// when a format changes, and commit what it writes:
//
//   clang++-14 -std=c++20 -I include -I lib -o /tmp/make_seeds fuzz/make_seeds.cpp \
//       lib/agent/agent_protocol.cpp lib/link/link_wire.cpp \
//       lib/connect/tcp/endpoint_message.cpp lib/group/bootstrap/rendezvous_message.cpp lib/rpc/rpc_wire.cpp \
//       lib/core/trace.cpp
//   /tmp/make_seeds fuzz/corpus
//
// Every format is little-endian (docs/wire-formats.md), whatever the host.
// Every seed is decoded again here before it is written: a seed the
// decoder refuses would be a wasted start, so this fails instead.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "agent/agent_protocol.hpp"
#include "connect/rdma_cm/cm_hello.hpp"
#include "connect/tcp/endpoint_message.hpp"
#include "group/bootstrap/rendezvous_message.hpp"
#include "link/link_wire.hpp"
#include "rpc/rpc_wire.hpp"

namespace cd = cordma::detail;
namespace lw = cordma::detail::link_wire;
namespace rw = cordma::detail::rpc_wire;

namespace {

std::filesystem::path root;

void write(const std::string& target, const std::string& name, const void* data, std::size_t size) {
    auto dir = root / target;
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
        std::fprintf(stderr, "make_seeds: cannot write %s\n", (dir / name).c_str());
        std::exit(1);
    }
}

[[noreturn]] void refused(const std::string& target, const std::string& name, const std::string& why) {
    std::fprintf(stderr, "make_seeds: the decoder refuses the seed %s/%s: %s\n", target.c_str(), name.c_str(),
                 why.c_str());
    std::exit(1);
}

// The link's frames: a header, and for data and abort frames the payload.
void link_frame(const std::string& name, lw::header h, const std::string& payload = {}) {
    h.size = (h.type == lw::frame::data || h.type == lw::frame::abort) ? payload.size() : h.size;
    std::byte head[lw::header_size + lw::trace_size];
    std::size_t n = lw::encode(h, head);
    std::vector<std::byte> bytes(head, head + n);
    bytes.resize(n + payload.size());
    std::memcpy(bytes.data() + n, payload.data(), payload.size());
    std::string why;
    if (!lw::decode(bytes, why))
        refused("link_wire", name, why);
    write("link_wire", name, bytes.data(), bytes.size());
}

void link_wire_seeds() {
    lw::header h;
    // A group's hello: root = group size, extra = the sender's rank, step =
    // the receiver's, seq = window, size = the group's id, addr = eager size.
    h = {};
    h.type = lw::frame::hello;
    h.root = 4;
    h.extra = 1;
    h.step = 2;
    h.seq = 64;
    h.size = 0x9e3779b97f4a7c15ull;
    h.addr = 8192;
    h.rkey = 1;  // hello_reads_traces
    link_frame("hello_group", h);
    // The C API's and a stream's hello: size = the module's mark
    // (link_hello.hpp), seq = window, addr = inline size.
    h = {};
    h.type = lw::frame::hello;
    h.seq = 32;
    h.size = 0x4341504900000001ull;  // c_api_hello_mark
    h.addr = 4096;
    h.rkey = 1;  // hello_reads_traces
    link_frame("hello_c_api", h);
    h.size = 0x5354524d00000001ull;  // stream_hello_mark
    link_frame("hello_stream", h);

    h = {};
    h.op = lw::module_op(2);  // a group's broadcast
    h.step = 1;
    h.seq = 3;
    h.acked = 2;
    h.root = 0;
    link_frame("data_broadcast", h, "sixteen bytes...");
    h = {};
    h.op = lw::module_op(8);  // a group's all_reduce
    h.seq = 7;
    h.extra = 3u << 8 | 1u;  // reductions: type << 8 | op
    link_frame("data_all_reduce", h, std::string(32, '\x01'));
    h = {};
    h.op = lw::op::message;
    h.seq = 1;
    link_frame("data_message", h, "a cordma_send message");
    h = {};
    h.op = lw::op::stream;
    h.seq = 9;
    link_frame("data_stream", h, "stream bytes");
    h.trace = cordma::trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736").value();
    link_frame("data_stream_traced", h, "traced stream bytes");
    h.trace = {};
    h.extra = 1;  // a stream's end: no bytes
    link_frame("stream_end", h);
    h = {};
    h.type = lw::frame::rts;
    h.op = lw::module_op(4);  // a group's all_gather
    h.seq = 5;
    h.acked = 4;
    h.size = 1 << 20;
    h.addr = 0x7f0012345000ull;
    h.rkey = 0x1234;
    link_frame("rts_all_gather", h);
    h.trace = cordma::trace_id::parse("0af7651916cd43dd8448eb211c80319c").value();
    link_frame("rts_all_gather_traced", h);
    h.trace = {};
    h.type = lw::frame::fin;
    h.acked = 5;
    link_frame("fin", h);
    h = {};
    h.type = lw::frame::credit;
    h.acked = 17;
    link_frame("credit", h);
    h = {};
    h.type = lw::frame::abort;
    h.root = 2;
    link_frame("abort", h, "rank 2: the peer timed out");
    h = {};
    h.type = lw::frame::ping;
    h.acked = 1;
    link_frame("ping", h);
}

void endpoint_seeds() {
    auto message = [](std::uint32_t qpn, bool agent, std::uint16_t private_length, bool ib) {
        cd::endpoint_message m;
        m.endpoint.qpn = qpn;
        m.endpoint.psn = 0xabcdef;
        if (ib) {
            m.endpoint.lid = 0x17;
        } else {
            // A RoCE v2 GID of 10.0.0.1 (::ffff:10.0.0.1).
            m.endpoint.gid.raw[10] = m.endpoint.gid.raw[11] = 0xff;
            m.endpoint.gid.raw[12] = 10;
            m.endpoint.gid.raw[15] = 1;
        }
        m.mtu = IBV_MTU_1024;
        m.agent = agent;
        m.private_data_length = private_length;
        auto bytes = cd::encode_endpoint_message(m);
        try {
            (void)cd::decode_endpoint_message(bytes);
        } catch (const std::exception& e) {
            refused("endpoint_message", "?", e.what());
        }
        return std::vector<std::uint8_t>(bytes.begin(), bytes.end());
    };
    // With the agent: the data QP's message, then the control QP's.
    auto pair = message(0x11, true, 0, false);
    auto control = message(0x12, true, 0, false);
    pair.insert(pair.end(), control.begin(), control.end());
    write("endpoint_message", "agent_pair", pair.data(), pair.size());
    auto ib = message(0x11, true, 0, true);
    write("endpoint_message", "agent_ib", ib.data(), ib.size());
    // Without it: the message, then its private data (a client's 56 bytes).
    auto plain = message(0x11, false, 56, false);
    plain.insert(plain.end(), 56, 0x5a);
    write("endpoint_message", "no_agent_private_data", plain.data(), plain.size());
    auto bare = message(0x11, false, 0, false);
    write("endpoint_message", "no_agent", bare.data(), bare.size());
}

template <class T>
void cm_seed(const std::string& name, const T& value, std::size_t padded_to) {
    std::vector<std::uint8_t> bytes(std::max(T::size, padded_to), 0);
    auto encoded = value.bytes();
    std::memcpy(bytes.data(), encoded.data(), encoded.size());
    cd::cm_event_copy e;
    e.private_data_len = static_cast<std::uint8_t>(bytes.size());
    std::memcpy(e.private_data.data(), bytes.data(), bytes.size());
    if (!T::from(e))
        refused("cm_hello", name, "from() gives nothing");
    write("cm_hello", name, bytes.data(), bytes.size());
}

void cm_hello_seeds() {
    cd::cm_hello hello;
    hello.kind = cd::cm_hello::data;
    hello.mtu = IBV_MTU_4096;
    hello.token = 0x0123456789abcdefull;
    cm_seed("hello_data", hello, 0);
    // As a connect request delivers it on RoCE and InfiniBand: padded with
    // zeros to 56 bytes.
    cm_seed("hello_data_padded", hello, 56);
    hello.kind = cd::cm_hello::control;
    hello.mtu = 0;  // no preference
    cm_seed("hello_control", hello, 0);
    cd::cm_reply reply;
    reply.mtu = IBV_MTU_1024;
    cm_seed("reply", reply, 0);
    cm_seed("reply_padded", reply, 196);  // an accept: 196 bytes
    cd::cm_refusal refusal;
    refusal.reason = cd::cm_refusal::listener_without_agent;
    cm_seed("refusal_without_agent", refusal, 0);
    refusal.reason = cd::cm_refusal::listener_with_agent;
    cm_seed("refusal_with_agent", refusal, 148);  // a reject: 148 bytes
    refusal.reason = cd::cm_refusal::backlog_full;
    refusal.backlog = 256;
    cm_seed("refusal_backlog_full", refusal, 148);
}

void agent_seed(const std::string& name, const cd::agent_protocol::message& m, std::uint16_t acked = 0) {
    std::vector<std::byte> bytes(cd::agent_protocol::max_message_size);
    bytes.resize(cd::agent_protocol::encode(m, bytes, acked));
    try {
        if (cd::agent_protocol::decode_frame(bytes).body != m)
            refused("agent_protocol", name, "it decodes to another message");
    } catch (const std::exception& e) {
        refused("agent_protocol", name, e.what());
    }
    write("agent_protocol", name, bytes.data(), bytes.size());
}

void agent_protocol_seeds() {
    namespace ap = cd::agent_protocol;
    agent_seed("request_mr", ap::request_mr{7, 65536, 64, 30000, 6});
    agent_seed("grant_mr", ap::grant_mr{7, 1, 0x7f0000001000, 4096, 0x1234, 30000, 6}, 3);
    agent_seed("grant_mr_unsolicited", ap::grant_mr{0, 2, 0x7f0000002000, 8192, 0x99, 1000, 4});
    agent_seed("deny_mr", ap::deny_mr{7, 12, "limit"});
    agent_seed("deny_mr_longest", ap::deny_mr{7, 12, std::string(ap::max_reason_length, 'x')});
    agent_seed("deny_mr_utf8", ap::deny_mr{7, 12, "m\u00e9moire \u5185\u5b58 \U0001F642"});
    agent_seed("return_mr", ap::return_mr{1});
    agent_seed("release_mr", ap::release_mr{{1}});
    std::vector<std::uint64_t> batch;
    for (std::uint64_t id = 1; id <= ap::max_release_batch; ++id)
        batch.push_back(id);
    agent_seed("release_mr_batch", ap::release_mr{batch}, 17);
    agent_seed("revoke_mr", ap::revoke_mr{42});
    agent_seed("ack", ap::ack{}, 0xffff);
}

void rendezvous_seeds() {
    auto publish = cd::encode_rendezvous_publish({1, 4, "10.0.0.2:29500"});
    write("rendezvous", "publish", publish.data(), publish.size());
    auto status = cd::encode_rendezvous_status({true, false, true, false, false, true, true, false, true});
    write("rendezvous", "status", status.data(), status.size());
    auto list = cd::encode_rendezvous_list({"10.0.0.1:29500", "10.0.0.2:29500", "[fe80::1]:29500", "host-3:1"});
    write("rendezvous", "list", list.data(), list.size());
    auto refused_frame = cd::encode_rendezvous_refused("rank 1 is already taken by 10.0.0.9:41234");
    write("rendezvous", "refused", refused_frame.data(), refused_frame.size());
    // What a rank reads from rank 0 in one conversation: status, then the list.
    auto conversation = status;
    auto all = cd::encode_rendezvous_status({true, true, true, true});
    conversation.insert(conversation.end(), all.begin(), all.end());
    conversation.insert(conversation.end(), list.begin(), list.end());
    write("rendezvous", "status_status_list", conversation.data(), conversation.size());

    // Every one decodes (header, then its payload).
    for (const char* name : {"publish", "status", "list", "refused"}) {
        std::ifstream in(root / "rendezvous" / name, std::ios::binary);
        std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        try {
            auto h = cd::decode_rendezvous_header(std::span<const std::uint8_t, 12>(bytes.data(), 12));
            std::span<const std::uint8_t> payload(bytes.data() + 12, bytes.size() - 12);
            if (payload.size() != h.length)
                refused("rendezvous", name, "its length is not its header's");
            switch (h.type) {
            case cd::rendezvous_type::publish: (void)cd::decode_rendezvous_publish(payload); break;
            case cd::rendezvous_type::status: (void)cd::decode_rendezvous_status(payload); break;
            case cd::rendezvous_type::list: (void)cd::decode_rendezvous_list(payload); break;
            case cd::rendezvous_type::refused: (void)cd::decode_rendezvous_refused(payload); break;
            }
        } catch (const std::exception& e) {
            refused("rendezvous", name, e.what());
        }
    }
}

}  // namespace

// cordma::rpc's frames: a 16-byte header and its payload (a request or
// response inline), or 48 bytes (every other frame); a traced request's
// trace id after either.
void rpc_frame(const std::string& name, rw::header h, const std::string& payload = {}) {
    h.size = rw::carries_payload(h.type) ? payload.size() : h.size;
    std::byte head[rw::header_size + rw::trace_size];
    std::size_t n = rw::encode(h, head);
    std::vector<std::byte> bytes(head, head + n);
    bytes.resize(n + payload.size());
    std::memcpy(bytes.data() + n, payload.data(), payload.size());
    std::string why;
    if (!rw::decode(bytes, why))
        refused("rpc_wire", name, why);
    write("rpc_wire", name, bytes.data(), bytes.size());
}

void rpc_wire_seeds() {
    using rw::frame;
    rpc_frame("hello_client", {.type = frame::hello, .code = rw::version, .size = 4048, .addr = 1 << 20,
                               .rkey = 16336});
    rpc_frame("hello_server", {.type = frame::hello, .credits = 16, .id = 0x7f00deadb000ull,
                               .code = rw::version | (rw::hello_deferred_credits | rw::hello_traces) << 16,
                               .size = 4048,
                               .addr = 1 << 20, .rkey = 0x1234});
    rpc_frame("request", {.type = frame::request, .id = 7, .code = 42}, "hello, server");
    rpc_frame("request_rts", {.type = frame::request_rts, .id = 8, .code = 42, .size = 1 << 20,
                              .addr = 0x7f0000100000ull, .rkey = 0x99});
    auto trace = cordma::trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736").value();
    rpc_frame("request_traced", {.type = frame::request, .id = 11, .code = 42, .trace = trace}, "traced");
    rpc_frame("request_rts_traced", {.type = frame::request_rts, .id = 12, .code = 42, .size = 1 << 20,
                                     .addr = 0x7f0000300000ull, .rkey = 0x98, .trace = trace});
    rpc_frame("response", {.type = frame::response, .credits = 1, .id = 7}, "hello, client");
    rpc_frame("response_error", {.type = frame::response, .credits = 1, .id = 9, .code = 3}, "no method 5");
    rpc_frame("response_rts", {.type = frame::response_rts, .credits = 1, .id = 8, .size = 1 << 20,
                               .addr = 0x7f0000200000ull, .rkey = 0x77});
    rpc_frame("done", {.type = frame::done, .id = 8});
    rpc_frame("done_room", {.type = frame::done, .id = 10, .code = 34, .size = 4048, .addr = 70});
    rpc_frame("credit", {.type = frame::credit, .credits = 4, .size = 2});
    rpc_frame("release", {.type = frame::release, .credits = 2});
    rpc_frame("grow", {.type = frame::grow, .credits = 1});
    rpc_frame("shrink", {.type = frame::shrink});
    rpc_frame("pad", {.type = frame::pad});
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds CORPUS-DIR (fuzz/corpus)\n");
        return 2;
    }
    root = argv[1];
    agent_protocol_seeds();
    link_wire_seeds();
    endpoint_seeds();
    cm_hello_seeds();
    rendezvous_seeds();
    rpc_wire_seeds();
    std::printf("make_seeds: wrote the seeds of agent_protocol, link_wire, endpoint_message, cm_hello, rendezvous "
                "and rpc_wire "
                "under %s\n",
                argv[1]);
    return 0;
}
