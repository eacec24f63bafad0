// The link (lib/link, docs/link.md), the framed channel group, stream and
// the C API stand on: its frame header round-trips, decode refuses what
// encode never writes, and its words are its own (no module named). No
// device needed; the link's traffic is tested through its modules (stream,
// group_messages, c_api) on rxe.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/trace.hpp>

#include "link/link_wire.hpp"

using namespace cordma;

TEST_CASE("a link frame header round-trips, and decode refuses one with its reserved bytes set", "[wire][link]") {
    namespace wire = detail::link_wire;
    std::string why;
    auto frame_of = [](const wire::header& h, std::size_t payload) {
        std::vector<std::byte> bytes(wire::header_length(h) + payload, std::byte{0x5a});
        std::byte head[wire::max_header_size];
        std::size_t n = wire::encode(h, head);
        CHECK(n == wire::header_length(h));
        std::copy_n(head, n, bytes.begin());
        return bytes;
    };
    wire::header data;
    data.op = wire::module_op(8);  // the owner's own op (a group's all_reduce)
    data.step = 3;
    data.seq = 7;
    data.acked = 6;
    data.extra = 3u << 8 | 1u;
    data.size = 16;
    auto bytes = frame_of(data, 16);
    CHECK(bytes.size() == 24 + 16);  // a data frame's header is 24 bytes, its size the rest
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    CHECK(back->op == wire::module_op(8));
    CHECK(back->step == 3);
    CHECK(back->seq == 7);
    CHECK(back->acked == 6);
    CHECK(back->extra == (3u << 8 | 1u));
    CHECK(back->size == 16);
    CHECK(wire::payload(bytes, *back).data() == bytes.data() + 24);
    back = wire::decode(frame_of(data, 0), why);
    REQUIRE(back);
    CHECK(back->size == 0);

    wire::header rts = data;
    rts.type = wire::frame::rts;
    rts.size = 1 << 20;
    rts.addr = 0x7f0000001000ull;
    rts.rkey = 0xabcd;
    auto rts_bytes = frame_of(rts, 0);
    CHECK(rts_bytes.size() == 48);
    back = wire::decode(rts_bytes, why);
    REQUIRE(back);
    CHECK(back->size == 1u << 20);
    CHECK(back->addr == 0x7f0000001000ull);
    CHECK(back->rkey == 0xabcd);

    // Found by link_wire_fuzz: decode took any bytes at 6..7 and 44..47,
    // which encode always writes as zero.
    for (std::size_t at : {6, 7}) {
        INFO("reserved byte " << at);
        auto b = bytes;
        b[at] = std::byte{0xf6};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("a data frame with its reserved bytes set"));
    }
    // Over rails, an rts carries its memory's key on each rail 1.. after
    // its header (and trace id).
    {
        wire::header railed = rts;
        railed.rails = 3;
        railed.rail_rkeys = {0x1111, 0x2222, 0};
        auto railed_bytes = frame_of(railed, 0);
        CHECK(railed_bytes.size() == 48 + 8);
        CHECK(railed_bytes[44] == std::byte{2});
        auto got = wire::decode(railed_bytes, why);
        REQUIRE(got);
        CHECK(got->rails == 3);
        CHECK(got->rail_rkeys[0] == 0x1111);
        CHECK(got->rail_rkeys[1] == 0x2222);
        railed.trace = trace_id::random();
        auto traced = frame_of(railed, 0);
        CHECK(traced.size() == 48 + 16 + 8);
        got = wire::decode(traced, why);
        REQUIRE(got);
        CHECK(got->trace == railed.trace);
        CHECK(got->rail_rkeys[1] == 0x2222);
        why.clear();
        CHECK_FALSE(wire::decode(std::span(railed_bytes).first(52), why));  // one key of two
        CHECK_THAT(why, Catch::Contains("naming 2 rail key(s)"));
    }
    for (std::size_t at : {6, 7}) {
        INFO("reserved byte " << at);
        auto b = rts_bytes;
        b[at] = std::byte{0xf6};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("rts frame with its reserved bytes set"));
    }
    // An rts's bytes 44..47 count the rail keys after it: at most 3, and
    // exactly as many as follow.
    for (std::size_t at : {44, 47}) {
        INFO("rail key count byte " << at);
        auto b = rts_bytes;
        b[at] = std::byte{0xf6};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("rail key(s) (at most 3)"));
    }
    {
        wire::header other;
        other.type = wire::frame::fin;
        auto b = frame_of(other, 0);
        b[44] = std::byte{1};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("fin frame with its reserved bytes set"));
    }
    why.clear();
    CHECK_FALSE(wire::decode(frame_of(rts, 16), why));
    CHECK_THAT(why, Catch::Contains("header says 0 bytes of payload"));
    why.clear();
    CHECK_FALSE(wire::decode(std::span(rts_bytes).first(40), why));
    CHECK_THAT(why, Catch::Contains("shorter than its 48-byte header"));
    why.clear();
    CHECK_FALSE(wire::decode(std::span(bytes).first(23), why));
    CHECK_THAT(why, Catch::Contains("shorter than the shortest (24-byte) header"));

    wire::header abort;
    abort.type = wire::frame::abort;
    abort.size = 5;
    auto abort_bytes = frame_of(abort, 5);
    back = wire::decode(abort_bytes, why);
    REQUIRE(back);
    CHECK(wire::payload(abort_bytes, *back).size() == 5);
    why.clear();
    CHECK_FALSE(wire::decode(frame_of(abort, 4), why));
    CHECK_THAT(why, Catch::Contains("header says 5 bytes of payload"));

    SECTION("a hello names the link protocol's version, and one from another is refused by name") {
        wire::header hello;
        hello.type = wire::frame::hello;
        hello.seq = 16;
        auto b = frame_of(hello, 0);
        CHECK(b[6] == std::byte{wire::version});
        REQUIRE(wire::decode(b, why));
        b[6] = std::byte{0};  // a version-1 peer's hello (48-byte data headers)
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("a hello of link protocol 1, this side speaks 2"));
    }
    SECTION("the op byte is the link's own (none, message, stream) or its owner's (1 to 8), nothing else") {
        for (int op = 0; op <= 10; ++op) {
            auto b = bytes;
            b[3] = static_cast<std::byte>(op);
            CHECK(wire::decode(b, why));
        }
        auto b = bytes;
        b[3] = std::byte{11};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("unknown op 11"));
        CHECK(wire::name(wire::op::stream) == "stream");
        CHECK(wire::name(wire::module_op(3)) == "op 3");
    }
    SECTION("a frame that is not the link's says so without naming a module") {
        auto b = bytes;
        b[0] = std::byte{0};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("the link's magic number"));
        CHECK(why.find("group") == std::string::npos);
    }
}

TEST_CASE("a traced data or rts frame carries its trace id after its header, and only those may", "[wire][link][trace]") {
    namespace wire = detail::link_wire;
    std::string why;
    auto id = *trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736");
    auto frame_of = [](const wire::header& h, std::size_t payload) {
        std::vector<std::byte> bytes(wire::header_length(h) + payload, std::byte{0x5a});
        CHECK(wire::encode(h, bytes) == wire::header_length(h));
        return bytes;
    };
    wire::header data;
    data.op = wire::op::stream;
    data.seq = 3;
    data.size = 10;
    data.trace = id;
    CHECK(wire::header_length(data) == 40);
    auto bytes = frame_of(data, 10);
    CHECK(bytes[2] == std::byte{0x82});  // data (2), the traced bit
    CHECK(bytes[24] == std::byte{0x4b});
    CHECK(bytes[39] == std::byte{0x36});
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    CHECK(back->trace == id);
    CHECK(back->size == 10);
    CHECK(wire::payload(bytes, *back).data() == bytes.data() + 40);

    wire::header rts = data;
    rts.type = wire::frame::rts;
    rts.size = 1 << 20;
    rts.addr = 0x7f0000004000ull;
    rts.rkey = 0x42;
    CHECK(wire::header_length(rts) == 64);
    back = wire::decode(frame_of(rts, 0), why);
    REQUIRE(back);
    CHECK(back->trace == id);
    CHECK(back->rkey == 0x42);
    CHECK(back->size == 1u << 20);

    // A fin (or any other control frame) given a trace is encoded without.
    wire::header fin = rts;
    fin.type = wire::frame::fin;
    std::vector<std::byte> fin_bytes(64);
    CHECK(wire::encode(fin, fin_bytes) == 48);
    fin_bytes.resize(48);
    back = wire::decode(fin_bytes, why);
    REQUIRE(back);
    CHECK(back->trace.empty());

    auto rejected = [&](std::vector<std::byte> b, const char* expected) {
        INFO(expected);
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains(expected));
    };
    auto b = frame_of(data, 0);
    b.resize(39);
    rejected(b, "shorter than its 24-byte header and trace id");
    b = frame_of(data, 0);
    std::fill(b.begin() + 24, b.begin() + 40, std::byte{0});
    rejected(b, "trace id is all zero");
    b = fin_bytes;
    b[2] |= std::byte{0x80};
    rejected(b, "a fin frame marked traced");
    rejected(frame_of(rts, 1), "whose header says 0 bytes of payload");
}
