// The link (lib/link, docs/link.md), the framed channel group, stream and
// the C API stand on: its frame header round-trips, decode refuses what
// encode never writes, and its words are its own (no module named). No
// device needed; the link's traffic is tested through its modules (stream,
// group_messages, c_api) on rxe.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "link/link_wire.hpp"

using namespace cordma;

TEST_CASE("a link frame header round-trips, and decode refuses one with its reserved bytes set", "[wire][link]") {
    namespace wire = detail::link_wire;
    std::string why;
    auto frame_of = [](const wire::header& h, std::size_t payload) {
        std::vector<std::byte> bytes(wire::header_size + payload, std::byte{0x5a});
        wire::encode(h, std::span<std::byte, wire::header_size>(bytes.data(), wire::header_size));
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
    auto back = wire::decode(bytes, why);
    REQUIRE(back);
    CHECK(back->op == wire::module_op(8));
    CHECK(back->step == 3);
    CHECK(back->extra == (3u << 8 | 1u));
    CHECK(back->size == 16);

    // Found by link_wire_fuzz: decode took any bytes at 6..7 and 44..47,
    // which encode always writes as zero.
    for (std::size_t at : {6, 7, 44, 47}) {
        INFO("reserved byte " << at);
        auto b = bytes;
        b[at] = std::byte{0xf6};
        why.clear();
        CHECK_FALSE(wire::decode(b, why));
        CHECK_THAT(why, Catch::Contains("a data frame with its reserved bytes set"));
    }
    why.clear();
    CHECK_FALSE(wire::decode(frame_of(data, 15), why));
    CHECK_THAT(why, Catch::Contains("header says 16 bytes of payload"));

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
