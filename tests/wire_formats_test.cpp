// The byte formats cordma puts on the wire besides the agent's (which has
// its own test, agent_protocol): the codec they all share
// (lib/wire/byte_codec.hpp), the TCP endpoint message and the rdma_cm
// hello, reply and refusal (docs/wire-formats.md) and the rpc frame header
// (lib/rpc/rpc_wire.hpp); the link's frames have their own test (link_test).
// No device needed.

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "connect/rdma_cm/cm_hello.hpp"
#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/rail_message.hpp"
#include "rpc/rpc_wire.hpp"
#include "wire/byte_codec.hpp"

using namespace cordma;

TEST_CASE("the byte codec writes and reads little-endian, and never past its buffer", "[wire]") {
    std::array<std::byte, 16> buffer{};
    detail::byte_writer w(buffer);
    w.u8(0x01);
    w.u16(0x0302);
    w.u32(0x07060504);
    w.u64(0x0f0e0d0c0b0a0908ull);
    CHECK(w.written() == 15);
    for (std::size_t i = 0; i < 15; ++i)
        CHECK(buffer[i] == static_cast<std::byte>(i + 1));
    CHECK_THROWS_AS(w.u16(0), std::out_of_range);
    w.zeros(1);
    CHECK(w.written() == 16);

    detail::byte_reader r(buffer);
    CHECK(r.u8() == 0x01);
    CHECK(r.u16() == 0x0302);
    CHECK(r.u32() == 0x07060504);
    CHECK(r.u64() == 0x0f0e0d0c0b0a0908ull);
    CHECK(r.remaining() == 1);
    CHECK_THROWS_AS(r.u16(), std::out_of_range);
    CHECK(r.u8() == 0);
    CHECK(r.remaining() == 0);

    // A fixed-size field (a trace id), copied as it is; never past the end.
    detail::byte_reader fixed(buffer);
    fixed.u8();
    auto four = fixed.array<4>();
    CHECK(four == std::array<std::byte, 4>{std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}});
    CHECK(fixed.remaining() == 11);
    CHECK_THROWS_AS(fixed.array<12>(), std::out_of_range);
}

TEST_CASE("the TCP endpoint message round-trips and every rejected field is named", "[wire]") {
    ibv_gid gid{};
    for (int i = 0; i < 16; ++i)
        gid.raw[i] = static_cast<std::uint8_t>(i + 1);
    detail::endpoint_message sent{{.qpn = 0x123456, .psn = 0xabcdef, .gid = gid, .lid = 0x1234}, IBV_MTU_2048};
    auto bytes = detail::encode_endpoint_message(sent);
    CHECK(bytes.size() == 36);
    CHECK(bytes[0] == 0x4d);  // magic 0x4352444d, little-endian
    CHECK(bytes[3] == 0x43);
    CHECK(bytes[8] == 0x56);  // qpn, little-endian
    CHECK(bytes[9] == 0x34);
    CHECK(bytes[10] == 0x12);
    CHECK(bytes[11] == 0x00);
    CHECK(bytes[16] == 1);  // the GID's raw bytes, as ibv_gid holds them
    CHECK(bytes[31] == 16);
    auto got = detail::decode_endpoint_message(bytes);
    CHECK(got.endpoint.qpn == sent.endpoint.qpn);
    CHECK(got.endpoint.psn == sent.endpoint.psn);
    CHECK(got.endpoint.lid == sent.endpoint.lid);
    CHECK(std::memcmp(got.endpoint.gid.raw, gid.raw, 16) == 0);
    CHECK(got.mtu == IBV_MTU_2048);

    auto broken = [&](auto change) {
        auto copy = bytes;
        change(copy);
        return copy;
    };
    using Catch::Contains;
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[0] = 'X'; })), Contains("field 'magic'"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[4] = 2; })),
                      Contains("field 'version' is 2"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[11] = 1; })), Contains("field 'qpn'"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[8] = 1, m[9] = m[10] = m[11] = 0; })),
                      Contains("field 'qpn' is 1"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[15] = 1; })), Contains("field 'psn'"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) {
                          std::fill(m.begin() + 16, m.begin() + 32, 0);
                          m[6] = m[7] = 0;
                      })),
                      Contains("field 'gid'"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[32] = 0; })), Contains("field 'mtu'"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[33] = 8; })),
                      Contains("field 'flags' is 8") && Contains("bits 1-2 (rails - 1)"));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(broken([](auto& m) { m[34] = 1; })),
                      Contains("field 'private_data_length' is 1, but only a message without an agent"));
    CHECK(got.agent);
    CHECK(bytes[33] == 0);
}

TEST_CASE("a TCP endpoint message carries its sender's number of rails", "[wire]") {
    ibv_gid gid{};
    gid.raw[15] = 1;
    for (std::uint8_t rails = 1; rails <= 4; ++rails) {
        detail::endpoint_message sent{{.qpn = 77, .psn = 5, .gid = gid, .lid = 0}, IBV_MTU_4096};
        sent.agent = rails % 2 == 0;
        sent.rails = rails;
        auto bytes = detail::encode_endpoint_message(sent);
        CHECK(bytes[33] == ((rails - 1) << 1 | (sent.agent ? 0 : 1)));
        auto got = detail::decode_endpoint_message(bytes);
        CHECK(got.rails == rails);
        CHECK(got.agent == sent.agent);
    }
}

TEST_CASE("a rail message round-trips, and each rejected field is named", "[wire]") {
    ibv_gid gid{};
    gid.raw[15] = 9;
    detail::rail_message sent;
    sent.what = detail::rail_kind::answer;
    sent.rail = 2;
    sent.attempt = 0x0506;
    sent.generation = 0x01020304;
    sent.endpoint = detail::endpoint_message{{.qpn = 0x4455, .psn = 0x77, .gid = gid, .lid = 0}, IBV_MTU_1024};
    sent.endpoint.rails = 3;
    sent.probe_address = 0x1122334455667788ull;
    sent.probe_rkey = 0xaabbccdd;
    auto bytes = detail::encode_rail_message(sent);
    CHECK(bytes.size() == 64);
    CHECK(std::memcmp(bytes.data(), "LDRC", 4) == 0);  // 0x4352444c, little-endian
    CHECK(bytes[4] == 3);
    CHECK(bytes[5] == 2);
    CHECK(bytes[6] == 0x06);
    CHECK(bytes[8] == 0x04);
    CHECK(bytes[12] == 'M');  // the endpoint message's own magic at offset 12
    CHECK(bytes[48] == 0x88);
    CHECK(bytes[56] == 0xdd);
    auto got = detail::decode_rail_message(bytes, 3);
    CHECK(got.what == detail::rail_kind::answer);
    CHECK(got.rail == 2);
    CHECK(got.attempt == 0x0506);
    CHECK(got.generation == 0x01020304);
    CHECK(got.endpoint.endpoint.qpn == 0x4455);
    CHECK(got.endpoint.mtu == IBV_MTU_1024);
    CHECK(got.endpoint.rails == 3);
    CHECK(got.probe_address == sent.probe_address);
    CHECK(got.probe_rkey == sent.probe_rkey);

    // A down carries no endpoint: its 36 bytes are zero and not decoded.
    detail::rail_message down;
    down.what = detail::rail_kind::down;
    down.rail = 1;
    down.generation = 7;
    auto down_bytes = detail::encode_rail_message(down);
    CHECK(std::all_of(down_bytes.begin() + 12, down_bytes.begin() + 48, [](std::uint8_t b) { return b == 0; }));
    CHECK(detail::decode_rail_message(down_bytes, 2).generation == 7);

    using Catch::Matchers::Contains;
    auto broken = [&](auto change) {
        auto copy = bytes;
        change(copy);
        return copy;
    };
    CHECK_THROWS_WITH(detail::decode_rail_message(broken([](auto& m) { m[0] = 'X'; }), 3), Contains("'magic'"));
    CHECK_THROWS_WITH(detail::decode_rail_message(broken([](auto& m) { m[4] = 0; }), 3), Contains("'kind'"));
    CHECK_THROWS_WITH(detail::decode_rail_message(broken([](auto& m) { m[4] = 5; }), 3), Contains("'kind'"));
    CHECK_THROWS_WITH(detail::decode_rail_message(broken([](auto& m) { m[5] = 0; }), 3), Contains("'rail' is 0"));
    // Rail 2 of a connection with two rails (0 and 1) does not exist.
    CHECK_THROWS_WITH(detail::decode_rail_message(bytes, 2), Contains("'rail' is 2"));
    CHECK_THROWS_WITH(detail::decode_rail_message(broken([](auto& m) { m[12] = 'X'; }), 3), Contains("'magic'"));
    CHECK_THROWS_AS(detail::decode_rail_message(broken([](auto& m) { m[44] = 0; }), 3), std::invalid_argument);
}

TEST_CASE("a TCP endpoint message without an agent carries its private data's length", "[wire]") {
    ibv_gid gid{};
    gid.raw[15] = 1;
    detail::endpoint_message sent{{.qpn = 77, .psn = 5, .gid = gid, .lid = 0}, IBV_MTU_4096};
    sent.agent = false;
    sent.private_data_length = 150;
    auto bytes = detail::encode_endpoint_message(sent);
    CHECK(bytes[33] == 1);  // flags: no agent
    CHECK(bytes[34] == 150);  // length, little-endian
    CHECK(bytes[35] == 0);
    auto got = detail::decode_endpoint_message(bytes);
    CHECK_FALSE(got.agent);
    CHECK(got.private_data_length == 150);
    bytes[35] = 1;  // 406 bytes: more than an accept carries
    CHECK_THROWS_WITH(detail::decode_endpoint_message(bytes),
                      Catch::Contains("field 'private_data_length' is 406, more than 196"));
}

TEST_CASE("a TCP listener's refusal is 36 bytes no endpoint message is mistaken for", "[wire]") {
    detail::endpoint_refusal refusal;
    refusal.backlog = 300;
    auto bytes = detail::encode_endpoint_refusal(refusal);
    CHECK(bytes[0] == 0x52);  // "CRDR", little-endian
    CHECK(bytes[3] == 0x43);
    auto got = detail::endpoint_refusal_of(bytes);
    REQUIRE(got);
    CHECK(got->reason == detail::endpoint_refusal::backlog_full);
    CHECK(got->backlog == 300);
    // An endpoint message is no refusal, and a refusal no endpoint message.
    ibv_gid gid{};
    gid.raw[15] = 1;
    auto message = detail::encode_endpoint_message({{.qpn = 77, .psn = 5, .gid = gid, .lid = 0}, IBV_MTU_4096});
    CHECK_FALSE(detail::endpoint_refusal_of(message));
    CHECK_THROWS_WITH(detail::decode_endpoint_message(bytes), Catch::Contains("field 'magic'"));
    bytes[4] = 2;  // another version: not read as a refusal of ours
    CHECK_FALSE(detail::endpoint_refusal_of(bytes));
}

namespace {

detail::cm_event_copy carrying(const void* data, std::size_t size) {
    detail::cm_event_copy event;
    event.private_data_len = static_cast<std::uint8_t>(size);
    if (size != 0)
        std::memcpy(event.private_data.data(), data, size);
    return event;
}

/// The private data a cm_hello, cm_reply or cm_refusal encodes to.
template <class Message>
detail::cm_event_copy carrying(const Message& message) {
    auto bytes = message.bytes();
    return carrying(bytes.data(), bytes.size());
}

}  // namespace

TEST_CASE("the rdma_cm hello and reply are recognised, and anything else is not", "[wire]") {
    detail::cm_hello hello;
    hello.kind = detail::cm_hello::control;
    hello.mtu = IBV_MTU_1024;
    hello.token = 0x1234567890abcdefULL;
    auto bytes = hello.bytes();
    CHECK(bytes[0] == std::byte{0x41});  // magic 0x43444d41, little-endian
    CHECK(bytes[3] == std::byte{0x43});
    CHECK(bytes[8] == std::byte{0xef});  // token, little-endian
    CHECK(bytes[15] == std::byte{0x12});
    auto got = detail::cm_hello::from(carrying(hello));
    REQUIRE(got.has_value());
    CHECK(got->kind == detail::cm_hello::control);
    CHECK(got->mtu == IBV_MTU_1024);
    CHECK(got->token == hello.token);

    SECTION("a client that is not cordma sends other private data, or none") {
        CHECK_FALSE(detail::cm_hello::from(carrying("hello", 5)).has_value());
        CHECK_FALSE(detail::cm_hello::from(carrying(nullptr, 0)).has_value());
        detail::cm_hello other = hello;
        other.magic = 0x12345678;
        CHECK_FALSE(detail::cm_hello::from(carrying(other)).has_value());
    }
    SECTION("a hello of another version, kind or MTU code is not one") {
        detail::cm_hello bad = hello;
        bad.version = 2;
        CHECK_FALSE(detail::cm_hello::from(carrying(bad)).has_value());
        bad = hello;
        bad.kind = 3;
        CHECK_FALSE(detail::cm_hello::from(carrying(bad)).has_value());
        bad = hello;
        bad.mtu = 6;
        CHECK_FALSE(detail::cm_hello::from(carrying(bad)).has_value());
    }
    SECTION("a hello cut short, which the connection manager pads with zeros, is not one") {
        // RoCE delivers 56 bytes of private data whatever was sent: the
        // first 7 bytes of a hello arrive as a hello with token 0.
        std::array<std::byte, 56> padded{};
        std::memcpy(padded.data(), hello.bytes().data(), 7);
        CHECK_FALSE(detail::cm_hello::from(carrying(padded.data(), padded.size())).has_value());
        detail::cm_hello even = hello;
        even.token = 0x1234567890abcdeeULL;
        CHECK_FALSE(detail::cm_hello::from(carrying(even)).has_value());
    }
    SECTION("the reply carries the agreed MTU, within 256..4096 bytes") {
        detail::cm_reply reply;
        reply.mtu = IBV_MTU_2048;
        auto r = detail::cm_reply::from(carrying(reply));
        REQUIRE(r.has_value());
        CHECK(r->mtu == IBV_MTU_2048);
        reply.mtu = 0;
        CHECK_FALSE(detail::cm_reply::from(carrying(reply)).has_value());
        CHECK_FALSE(detail::cm_reply::from(carrying(hello)).has_value());
    }
    SECTION("a refusal names one of three reasons, and nothing else is one") {
        detail::cm_refusal refusal;
        refusal.reason = detail::cm_refusal::listener_without_agent;
        auto r = detail::cm_refusal::from(carrying(refusal));
        REQUIRE(r.has_value());
        CHECK(r->reason == detail::cm_refusal::listener_without_agent);
        refusal.reason = 4;
        CHECK_FALSE(detail::cm_refusal::from(carrying(refusal)).has_value());
        // A full backlog names its size, and only it carries one.
        refusal.reason = detail::cm_refusal::backlog_full;
        CHECK_FALSE(detail::cm_refusal::from(carrying(refusal)).has_value());
        refusal.backlog = 256;
        r = detail::cm_refusal::from(carrying(refusal));
        REQUIRE(r.has_value());
        CHECK(r->backlog == 256);
        refusal.reason = detail::cm_refusal::listener_with_agent;
        CHECK_FALSE(detail::cm_refusal::from(carrying(refusal)).has_value());
        CHECK_FALSE(detail::cm_refusal::from(carrying(hello)).has_value());
        CHECK_FALSE(detail::cm_refusal::from(carrying(nullptr, 0)).has_value());
        detail::cm_reply reply;
        reply.mtu = IBV_MTU_1024;
        CHECK_FALSE(detail::cm_refusal::from(carrying(reply)).has_value());
    }
    // Found by cm_hello_fuzz: each `from` took any reserved bytes, which
    // cordma always writes as zero (docs/wire-formats.md).
    SECTION("none of the three has its reserved bytes set") {
        detail::cm_hello bad = hello;
        bad.reserved = 1;
        CHECK_FALSE(detail::cm_hello::from(carrying(bad)).has_value());
        detail::cm_reply reply;
        reply.mtu = IBV_MTU_1024;
        reply.reserved = 0x3a00;
        CHECK_FALSE(detail::cm_reply::from(carrying(reply)).has_value());
        detail::cm_refusal refusal;
        refusal.reason = detail::cm_refusal::listener_with_agent;
        refusal.backlog = 0x3a;  // the fuzzer's input: "NMDC" 1 1 0x3a 0
        CHECK_FALSE(detail::cm_refusal::from(carrying(refusal)).has_value());
    }
}

TEST_CASE("an rpc frame header round-trips, and decode names what is wrong with a bad one", "[wire][rpc]") {
    namespace wire = detail::rpc_wire;
    std::string why;
    auto frame_of = [](const wire::header& h, std::size_t payload) {
        std::vector<std::byte> bytes(wire::header_length(h.type) + payload, std::byte{0x5a});
        std::byte head[wire::header_size];
        std::size_t n = wire::encode(h, head);
        CHECK(n == wire::header_length(h.type));
        std::copy_n(head, n, bytes.begin());
        return bytes;
    };

    // An inline request or response: a 16-byte header, 32-bit id, the
    // payload's size the rest of the frame.
    wire::header request{wire::frame::request, 0, 0x05060708u, 42, 5, 0, 0};
    auto bytes = frame_of(request, 5);
    CHECK(bytes.size() == 16 + 5);
    CHECK(bytes[0] == std::byte{0x52});  // little-endian magic "RP"
    CHECK(bytes[1] == std::byte{0x50});
    CHECK(bytes[2] == std::byte{2});  // version 2
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    CHECK(back->type == wire::frame::request);
    CHECK(back->id == 0x05060708u);
    CHECK(back->code == 42);
    CHECK(back->size == 5);
    wire::header response{wire::frame::response, 3, wire::largest_id, 0, 0, 0, 0};
    back = wire::decode(frame_of(response, 0), why);
    REQUIRE(back);
    CHECK(back->credits == 3);
    CHECK(back->id == wire::largest_id);
    CHECK(back->size == 0);

    wire::header rts{wire::frame::response_rts, 3, 9, 0, 1ull << 26, 0x7f0000001000ull, 0xabcd};
    back = wire::decode(frame_of(rts, 0), why);
    REQUIRE(back);
    CHECK(back->credits == 3);
    CHECK(back->size == 1ull << 26);
    CHECK(back->addr == 0x7f0000001000ull);
    CHECK(back->rkey == 0xabcd);

    auto rejected = [&](std::vector<std::byte> b, const char* expected) {
        INFO(expected);
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains(expected));
    };
    rejected(std::vector<std::byte>(15), "shorter than the shortest (16-byte) header");
    auto short_rts = frame_of(rts, 0);
    short_rts.resize(47);
    rejected(short_rts, "shorter than its 48-byte header");
    auto b = frame_of(request, 5);
    b[0] = std::byte{0};
    rejected(b, "magic");
    b = frame_of(request, 5);
    b[2] = std::byte{1};  // a version-1 peer: 48-byte headers everywhere
    rejected(b, "protocol version 1 (this side speaks 2");
    b = frame_of(request, 5);
    b[3] = std::byte{99};
    rejected(b, "unknown type 99");
    b = frame_of(rts, 0);
    b[20] = std::byte{1};
    rejected(b, "reserved bytes");
    b = frame_of(rts, 0);
    b[12] = std::byte{1};  // the id's high half: ids are 32 bits
    rejected(b, "over 32 bits");
    rejected(frame_of(rts, 3), "header says 0 bytes of payload");
    rejected(frame_of(wire::header{wire::frame::request_rts, 0, 1, 1, 0, 4096, 7}, 0), "for 0 bytes");
    rejected(frame_of(wire::header{wire::frame::done, 0, 1, 0, 0, 4096, 7}, 0), "address or key");

    // Elastic receives: a done may answer a grow (addr: the first big
    // receive, size: the room, code: how many receives); no other frame
    // but the rendezvous ones carries an address.
    back = wire::decode(frame_of(wire::header{wire::frame::done, 0, 1, 34, 4096, 70, 0}, 0), why);
    REQUIRE(back);
    CHECK(back->addr == 70);
    CHECK(back->size == 4096);
    CHECK(back->code == 34);
    for (auto type : {wire::frame::grow, wire::frame::shrink, wire::frame::pad}) {
        back = wire::decode(frame_of(wire::header{type, 2, 0, 0, 0, 0, 0}, 0), why);
        REQUIRE(back);
        CHECK(back->type == type);
        CHECK(back->credits == 2);
        rejected(frame_of(wire::header{type, 0, 0, 0, 0, 64, 0}, 0), "address or key");
        rejected(frame_of(wire::header{type, 0, 0, 0, 0, 0, 0}, 8), "header says 0 bytes of payload");
    }
    CHECK(std::string(wire::name(wire::frame::grow)) == "grow");
    CHECK(std::string(wire::name(wire::frame::pad)) == "pad");
    b = frame_of(request, 5);
    b[3] = std::byte{12};
    rejected(b, "unknown type 12");
}

TEST_CASE("an rpc rendezvous frame carries its memory's key on each rail after its header", "[wire][rpc][rails]") {
    namespace wire = detail::rpc_wire;
    std::string why;
    auto id = trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736");
    REQUIRE(id);
    wire::header h{wire::frame::request_rts, 0, 9, 1, 1 << 20, 0x7f0000002000ull, 0xabc};
    remote_slice region{0x7f0000002000ull, 1 << 20, 0xabc};
    region.rails = 3;
    region.rail_rkeys = {0x111, 0x222, 0};
    wire::set_key(h, region);
    h.trace = *id;
    CHECK(wire::header_length(h) == 48 + 16 + 8);
    std::vector<std::byte> bytes(wire::header_length(h));
    CHECK(wire::encode(h, bytes) == bytes.size());
    CHECK(bytes[44] == std::byte{2});
    CHECK(bytes[64] == std::byte{0x11});  // after the trace id
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    remote_slice read = wire::where(*back);
    CHECK(read.rkey == 0xabc);
    CHECK(read.rails == 3);
    CHECK(read.rail_rkeys[0] == 0x111);
    CHECK(read.rail_rkeys[1] == 0x222);
    CHECK(back->trace == *id);

    auto broken = bytes;
    broken[44] = std::byte{4};
    CHECK_FALSE(wire::decode(broken, why));
    CHECK_THAT(why, Catch::Contains("naming 4 rail keys (at most 3)"));
    CHECK_FALSE(wire::decode(std::span(bytes).first(bytes.size() - 4), why));
    CHECK_THAT(why, Catch::Contains("and 2 rail key(s)"));
    // Only a rendezvous frame has keys.
    wire::header done{wire::frame::done, 0, 9, 0, 0, 0, 0};
    std::vector<std::byte> done_bytes(wire::header_length(done));
    wire::encode(done, done_bytes);
    done_bytes[44] = std::byte{1};
    CHECK_FALSE(wire::decode(done_bytes, why));
    CHECK_THAT(why, Catch::Contains("done frame with its reserved bytes set"));
}

TEST_CASE("a traced rpc request carries its trace id after its header, and only a request may", "[wire][rpc][trace]") {
    namespace wire = detail::rpc_wire;
    std::string why;
    auto id = trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736");
    REQUIRE(id);
    auto frame_of = [](const wire::header& h, std::size_t payload) {
        std::vector<std::byte> bytes(wire::header_length(h) + payload, std::byte{0x5a});
        CHECK(wire::encode(h, bytes) == wire::header_length(h));
        return bytes;
    };

    // Inline: 16-byte header, 16-byte trace id, then the payload.
    wire::header request{wire::frame::request, 0, 7, 3, 5, 0, 0, *id};
    CHECK(wire::header_length(request) == 32);
    auto bytes = frame_of(request, 5);
    CHECK(bytes.size() == 37);
    CHECK(bytes[3] == std::byte{0x82});  // request (2), the traced bit
    CHECK(bytes[16] == std::byte{0x4b});  // the id in the hex text's order
    CHECK(bytes[31] == std::byte{0x36});
    CHECK(bytes[32] == std::byte{0x5a});  // the payload after it
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    CHECK(back->type == wire::frame::request);
    CHECK(back->trace == *id);
    CHECK(back->size == 5);
    CHECK(back->id == 7);
    CHECK(back->code == 3);
    CHECK(wire::header_length(*back) == 32);

    // Untraced: as before, no trace.
    back = wire::decode(frame_of(wire::header{wire::frame::request, 0, 7, 3, 5, 0, 0}, 5), why);
    REQUIRE(back);
    CHECK(back->trace.empty());
    CHECK(back->size == 5);

    // Rendezvous: 48-byte header, then the id; nothing after.
    wire::header rts{wire::frame::request_rts, 0, 8, 3, 1 << 20, 0x7f0000002000ull, 0x77, *id};
    CHECK(wire::header_length(rts) == 64);
    back = wire::decode(frame_of(rts, 0), why);
    REQUIRE(back);
    CHECK(back->trace == *id);
    CHECK(back->size == 1 << 20);
    CHECK(back->rkey == 0x77);

    auto rejected = [&](std::vector<std::byte> b, const char* expected) {
        INFO(expected);
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains(expected));
    };
    auto b = frame_of(request, 0);
    b.resize(31);  // the id cut short
    rejected(b, "shorter than its header and trace id (32)");
    b = frame_of(request, 0);
    std::fill(b.begin() + 16, b.begin() + 32, std::byte{0});
    rejected(b, "trace id is all zero");
    b = frame_of(wire::header{wire::frame::response, 0, 7, 0, 0, 0, 0}, 16);
    b[3] |= std::byte{0x80};  // only requests carry one
    rejected(b, "a response frame marked traced");
    auto long_rts = frame_of(rts, 1);
    rejected(long_rts, "header says 0 bytes of payload");
}
