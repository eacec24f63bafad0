#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/agent_protocol.hpp"

using namespace cordma::detail::agent_protocol;
using bytes = std::vector<std::byte>;

namespace {

template <class... F>
struct overloaded : F... {
    using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

// An encoder written straight from the tables in docs/agent-protocol.md that
// checks nothing, to put messages that break the rules on the wire and to
// hold lib/agent_protocol.cpp to the documented layout.
struct raw {
    bytes b;

    raw& u8(std::uint64_t v) {
        b.push_back(static_cast<std::byte>(v & 0xff));
        return *this;
    }
    raw& le(std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i)
            u8(v >> (8 * i));
        return *this;
    }
    raw& u16(std::uint64_t v) { return le(v, 2); }
    raw& u32(std::uint64_t v) { return le(v, 4); }
    raw& u64(std::uint64_t v) { return le(v, 8); }
    raw& str(const std::string& s) {
        for (char c : s)
            u8(static_cast<unsigned char>(c));
        return *this;
    }
};

bytes raw_wire(const message& m) {
    raw body;
    std::visit(overloaded{
                   [&](const request_mr& r) { body.u32(r.request_id).u64(r.size).u32(r.alignment).u32(r.lease_ms).u32(r.access); },
                   [&](const grant_mr& g) {
                       body.u32(g.request_id).u64(g.region_id).u64(g.address).u64(g.length).u32(g.rkey).u32(g.lease_ms).u32(g.access);
                       for (std::size_t i = 0; i + 1 < g.rails; ++i)
                           body.u32(g.rail_rkeys[i]);
                   },
                   [&](const deny_mr& d) { body.u32(d.request_id).u32(d.code).u16(d.reason.size()).str(d.reason); },
                   [&](const return_mr& r) { body.u64(r.region_id); },
                   [&](const release_mr& r) {
                       body.u16(r.region_ids.size());
                       for (auto id : r.region_ids)
                           body.u64(id);
                   },
                   [&](const revoke_mr& r) { body.u64(r.region_id); },
                   [&](const ack&) {},
               },
               m);
    raw out;
    out.u16(0x4341).u8(2).u8(m.index() + 1).u16(body.b.size()).u16(0);
    out.b.insert(out.b.end(), body.b.begin(), body.b.end());
    return out.b;
}

bytes wire(const message& m, std::uint16_t acked = 0) {
    bytes out(max_message_size);
    out.resize(encode(m, out, acked));
    return out;
}

std::vector<std::uint64_t> ids(std::size_t n) {
    std::vector<std::uint64_t> out;
    for (std::size_t i = 1; i <= n; ++i)
        out.push_back(i * 0x0101010101010101);
    return out;
}

bytes hex_bytes(std::initializer_list<int> v) {
    bytes out;
    for (int x : v)
        out.push_back(static_cast<std::byte>(x));
    return out;
}

// The rules' edge values: the largest and smallest a field may be.
std::vector<message> samples() {
    return {
        request_mr{7, 4096, 64, 0, 2 | 4},
        request_mr{0xffffffff, std::uint64_t{1} << 40, 4096, 0xffffffff, 2 | 4 | 8},
        request_mr{1, 1, 1, 1, 8},
        grant_mr{7, 1, 0x7f0000001000, 4096, 0x1234, 30000, 2 | 4},
        grant_mr{0, 0xffffffffffffffff, 0xffffffffffffff00, 0xff, 0xffffffff, 0xffffffff, 2 | 4 | 8},
        grant_mr{3, 9, 0x1000, 4096, 0x1234, 100, 2 | 4, 4, {0x1111, 0x2222, 0x3333}},
        deny_mr{7, 12, "over the limit: 64 MiB per region"},
        deny_mr{0xffffffff, 0x7fffffff, ""},
        deny_mr{1, 105, std::string(max_reason_length, 'x')},
        deny_mr{2, 12, "mémoire épuisée — 内存不足 🙂"},
        return_mr{1},
        release_mr{{0xffffffffffffffff}},
        release_mr{ids(max_release_batch)},
        revoke_mr{42},
        ack{},
    };
}

void check_rejected(const message& m, const std::string& problem) {
    INFO("problem: " << problem);
    CHECK_THROWS_MATCHES(decode(raw_wire(m)), protocol_error, Catch::Matchers::Message("agent message: " + problem));
    bytes out(max_message_size);
    CHECK_THROWS_MATCHES(encode(m, out), std::invalid_argument,
                         Catch::Matchers::Message("agent_protocol::encode: " + problem));
}

std::string decode_error(const bytes& in) {
    try {
        decode(in);
    } catch (const protocol_error& e) {
        return e.what();
    }
    return "(decoded)";
}

}  // namespace

TEST_CASE("every message type survives encode then decode unchanged", "[agent_protocol]") {
    for (const auto& m : samples()) {
        INFO(to_string(type_of(m)));
        auto w = wire(m);
        CHECK(w == raw_wire(m));
        CHECK(w.size() <= max_message_size);
        CHECK(decode(w) == m);
    }
}

TEST_CASE("the wire layout is the documented one, little-endian", "[agent_protocol]") {
    SECTION("request_mr: 8-byte header and a 24-byte body") {
        CHECK(wire(request_mr{0x01020304, 0x10000, 64, 30000, 6}) ==
              hex_bytes({0x41, 0x43, 0x02, 0x01, 0x18, 0x00, 0x00, 0x00,   // header
                         0x04, 0x03, 0x02, 0x01,                           // request_id
                         0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,   // size
                         0x40, 0x00, 0x00, 0x00,                           // alignment
                         0x30, 0x75, 0x00, 0x00,                           // lease_ms
                         0x06, 0x00, 0x00, 0x00}));                        // access
    }
    SECTION("grant_mr: a 40-byte body") {
        auto w = wire(grant_mr{1, 2, 0x1000, 0x2000, 0xabcd, 5, 4});
        REQUIRE(w.size() == 48);
        CHECK(w[3] == std::byte{2});
        CHECK(w[4] == std::byte{40});
        CHECK(bytes(w.begin() + 36, w.end()) ==
              hex_bytes({0xcd, 0xab, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00}));
    }
    SECTION("grant_mr over rails: the region's key on each rail 1.. after the 40 bytes") {
        auto w = wire(grant_mr{1, 2, 0x1000, 0x2000, 0xabcd, 5, 4, 3, {0x11, 0x22, 0}});
        REQUIRE(w.size() == 48 + 8);
        CHECK(w[4] == std::byte{48});
        CHECK(bytes(w.begin() + 48, w.end()) == hex_bytes({0x11, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00}));
        auto back = std::get<grant_mr>(decode(w));
        CHECK(back.rails == 3);
        CHECK(back.rail_rkeys[1] == 0x22);
    }
    SECTION("deny_mr: 10 fixed bytes, then the reason") {
        CHECK(wire(deny_mr{9, 12, "no"}) == hex_bytes({0x41, 0x43, 0x02, 0x03, 0x0c, 0x00, 0x00, 0x00,  // header
                                                       0x09, 0x00, 0x00, 0x00,                          // request_id
                                                       0x0c, 0x00, 0x00, 0x00,                          // code
                                                       0x02, 0x00, 'n', 'o'}));                          // reason
        CHECK(wire(deny_mr{9, 12, std::string(max_reason_length, 'x')}).size() == 8 + 10 + 200);
    }
    SECTION("return_mr, release_mr and revoke_mr: the region id alone") {
        CHECK(wire(revoke_mr{0x0102030405060708}) ==
              hex_bytes({0x41, 0x43, 0x02, 0x06, 0x08, 0x00, 0x00, 0x00, 8, 7, 6, 5, 4, 3, 2, 1}));
        CHECK(wire(return_mr{1})[3] == std::byte{4});
    }
    SECTION("release_mr: a count, then that many region ids") {
        CHECK(wire(release_mr{{1, 0x0102030405060708}}) ==
              hex_bytes({0x41, 0x43, 0x02, 0x05, 0x12, 0x00, 0x00, 0x00,  // header
                         0x02, 0x00,                                      // count
                         1, 0, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1}));  // region ids
        CHECK(wire(release_mr{ids(max_release_batch)}).size() == 8 + 2 + 8 * 30);
    }
    SECTION("ack: the header alone, acknowledging in its last two bytes") {
        CHECK(wire(ack{}, 0x0102) == hex_bytes({0x41, 0x43, 0x02, 0x07, 0x00, 0x00, 0x02, 0x01}));
    }
}

TEST_CASE("message types print by name", "[agent_protocol]") {
    CHECK(std::string(to_string(message_type::request_mr)) == "request_mr");
    CHECK(std::string(to_string(message_type::revoke_mr)) == "revoke_mr");
    CHECK(std::string(to_string(message_type::ack)) == "ack");
    CHECK(std::string(to_string(static_cast<message_type>(0))) == "unknown");
    CHECK(type_of(deny_mr{}) == message_type::deny_mr);
}

TEST_CASE("decode rejects a bad header with a protocol_error naming the problem", "[agent_protocol]") {
    auto good = wire(revoke_mr{42});

    SECTION("shorter than the header") {
        CHECK(decode_error({}) == "agent message: 0 bytes is shorter than the 8-byte header");
        CHECK(decode_error(bytes(good.begin(), good.begin() + 7)) ==
              "agent message: 7 bytes is shorter than the 8-byte header");
    }
    SECTION("bad magic") {
        good[0] = std::byte{0x34};
        good[1] = std::byte{0x12};
        CHECK(decode_error(good) == "agent message: bad magic 0x1234 (expected 0x4341)");
    }
    SECTION("another version, naming both") {
        good[2] = std::byte{7};
        CHECK(decode_error(good) == "agent message: version 7 not supported (this side speaks 2)");
        good[2] = std::byte{0};
        CHECK(decode_error(good) == "agent message: version 0 not supported (this side speaks 2)");
    }
    SECTION("the version is checked before the rest of the header") {
        good[2] = std::byte{3};
        good[3] = std::byte{0xee};
        good.push_back(std::byte{0});
        CHECK(decode_error(good) == "agent message: version 3 not supported (this side speaks 2)");
    }
    SECTION("unknown type") {
        good[3] = std::byte{0};
        CHECK(decode_error(good) == "agent message: unknown message type 0");
        good[3] = std::byte{8};
        CHECK(decode_error(good) == "agent message: unknown message type 8");
        good[3] = std::byte{255};
        CHECK(decode_error(good) == "agent message: unknown message type 255");
    }
    SECTION("acked carries any value, little-endian") {
        auto w = wire(revoke_mr{42}, 0xbeef);
        CHECK(w[6] == std::byte{0xef});
        CHECK(w[7] == std::byte{0xbe});
        auto f = decode_frame(w);
        CHECK(f.acked == 0xbeef);
        CHECK(f.body == message(revoke_mr{42}));
    }
    SECTION("body_length is not the rest of the buffer") {
        auto longer = good;
        longer.push_back(std::byte{0});
        CHECK(decode_error(longer) == "agent message: revoke_mr header says body_length 8 but 9 bytes follow");
        good[4] = std::byte{7};
        CHECK(decode_error(good) == "agent message: revoke_mr header says body_length 7 but 8 bytes follow");
    }
    SECTION("body_length is not the type's size") {
        auto w = raw{}.u16(0x4341).u8(2).u8(2).u16(8).u16(0).u64(1).b;
        CHECK(decode_error(w) == "agent message: grant_mr body is 8 bytes (expected 40, plus 4 per rail key, at most 3)");
        w = raw{}.u16(0x4341).u8(2).u8(2).u16(42).u16(0).u64(1).u64(1).u64(1).u64(1).u64(1).u16(0).b;
        CHECK(decode_error(w) == "agent message: grant_mr body is 42 bytes (expected 40, plus 4 per rail key, at most 3)");
        w = raw{}.u16(0x4341).u8(2).u8(1).u16(0).u16(0).b;
        CHECK(decode_error(w) == "agent message: request_mr body is 0 bytes (expected 24)");
        w = raw{}.u16(0x4341).u8(2).u8(5).u16(11).u16(0).u16(1).u64(1).u8(0).b;
        CHECK(decode_error(w) == "agent message: release_mr body is 11 bytes but count 1 needs 10");
        w = raw{}.u16(0x4341).u8(2).u8(5).u16(1).u16(0).u8(0).b;
        CHECK(decode_error(w) == "agent message: release_mr body is 1 bytes (at least 2)");
        w = raw{}.u16(0x4341).u8(2).u8(5).u16(2).u16(0).u16(31).b;
        CHECK(decode_error(w) == "agent message: release_mr.count 31 is not 1 to 30");
        w = raw{}.u16(0x4341).u8(2).u8(7).u16(1).u16(0).u8(0).b;
        CHECK(decode_error(w) == "agent message: ack body is 1 bytes (expected 0)");
    }
    SECTION("a deny_mr whose reason_length disagrees with its body") {
        auto w = raw{}.u16(0x4341).u8(2).u8(3).u16(9).u16(0).u32(1).u32(12).u8(0).b;
        CHECK(decode_error(w) == "agent message: deny_mr body is 9 bytes (at least 10)");
        w = raw{}.u16(0x4341).u8(2).u8(3).u16(12).u16(0).u32(1).u32(12).u16(3).str("ab").b;
        CHECK(decode_error(w) == "agent message: deny_mr body is 12 bytes but reason_length 3 needs 13");
        w = raw{}.u16(0x4341).u8(2).u8(3).u16(12).u16(0).u32(1).u32(12).u16(1).str("ab").b;
        CHECK(decode_error(w) == "agent message: deny_mr body is 12 bytes but reason_length 1 needs 11");
        w = raw{}.u16(0x4341).u8(2).u8(3).u16(211).u16(0).u32(1).u32(12).u16(201).str(std::string(201, 'x')).b;
        CHECK(decode_error(w) == "agent message: deny_mr.reason_length 201 is over 200");
        w = raw{}.u16(0x4341).u8(2).u8(3).u16(10).u16(0).u32(1).u32(12).u16(0xffff).b;
        CHECK(decode_error(w) == "agent message: deny_mr.reason_length 65535 is over 200");
    }
}

TEST_CASE("a field out of its range is refused by decode and by encode alike", "[agent_protocol]") {
    SECTION("request_mr.request_id is nonzero (a grant_mr answering 0 would read as unsolicited)") {
        check_rejected(request_mr{0, 64, 8, 0, 2}, "request_mr.request_id is 0");
    }
    SECTION("request_mr.size is 1 .. 2^40") {
        check_rejected(request_mr{1, 0, 8, 0, 2}, "request_mr.size is 0");
        check_rejected(request_mr{1, (std::uint64_t{1} << 40) + 1, 8, 0, 2}, "request_mr.size 1099511627777 is over 2^40");
        check_rejected(request_mr{1, ~std::uint64_t{0}, 8, 0, 2}, "request_mr.size 18446744073709551615 is over 2^40");
    }
    SECTION("request_mr.alignment is a power of two, 1 .. 4096") {
        check_rejected(request_mr{1, 64, 0, 0, 2}, "request_mr.alignment is 0");
        check_rejected(request_mr{1, 64, 3, 0, 2}, "request_mr.alignment 3 is not a power of two from 1 to 4096");
        check_rejected(request_mr{1, 64, 8192, 0, 2}, "request_mr.alignment 8192 is not a power of two from 1 to 4096");
        check_rejected(request_mr{1, 64, 0x80000000, 0, 2},
                       "request_mr.alignment 2147483648 is not a power of two from 1 to 4096");
        for (std::uint32_t a = 1; a <= 4096; a *= 2)
            CHECK_NOTHROW(decode(wire(request_mr{1, 64, a, 0, 2})));
    }
    SECTION("request_mr.access is nonzero, remote bits only") {
        check_rejected(request_mr{1, 64, 8, 0, 0}, "request_mr.access is 0 (no access)");
        check_rejected(request_mr{1, 64, 8, 0, 1 | 2},
                       "request_mr.access 0x3 has bits other than remote_write|remote_read|remote_atomic (0xe)");
        check_rejected(request_mr{1, 64, 8, 0, 0x10},
                       "request_mr.access 0x10 has bits other than remote_write|remote_read|remote_atomic (0xe)");
    }
    SECTION("grant_mr.region_id is nonzero") {
        check_rejected(grant_mr{1, 0, 0x1000, 64, 1, 100, 2}, "grant_mr.region_id is 0");
    }
    SECTION("grant_mr.length is nonzero") {
        check_rejected(grant_mr{1, 1, 0x1000, 0, 1, 100, 2}, "grant_mr.length is 0");
    }
    SECTION("grant_mr.address + length stays within 64 bits") {
        check_rejected(grant_mr{1, 1, 0xfffffffffffff000, 0x1000, 1, 100, 2},
                       "grant_mr.address 0xfffffffffffff000 + length 0x1000 overflows 64 bits");
        check_rejected(grant_mr{1, 1, 1, ~std::uint64_t{0}, 1, 100, 2},
                       "grant_mr.address 0x1 + length 0xffffffffffffffff overflows 64 bits");
        CHECK_NOTHROW(decode(wire(grant_mr{1, 1, 0xfffffffffffff000, 0xfff, 1, 100, 2})));
    }
    SECTION("grant_mr.lease_ms is nonzero") {
        check_rejected(grant_mr{1, 1, 0x1000, 64, 1, 0, 2}, "grant_mr.lease_ms is 0");
    }
    SECTION("grant_mr.access is nonzero, remote bits only") {
        check_rejected(grant_mr{1, 1, 0x1000, 64, 1, 100, 0}, "grant_mr.access is 0 (no access)");
        check_rejected(grant_mr{1, 1, 0x1000, 64, 1, 100, 0x80000004},
                       "grant_mr.access 0x80000004 has bits other than remote_write|remote_read|remote_atomic (0xe)");
    }
    SECTION("deny_mr.request_id is nonzero") {
        check_rejected(deny_mr{0, 12, "no"}, "deny_mr.request_id is 0");
    }
    SECTION("deny_mr.code is an error code: nonzero, fits an int") {
        check_rejected(deny_mr{1, 0, "no"}, "deny_mr.code is 0 (a denial needs an error code)");
        check_rejected(deny_mr{1, 0x80000000, "no"}, "deny_mr.code 2147483648 does not fit an int");
    }
    SECTION("deny_mr.reason is at most 200 bytes") {
        bytes out(max_message_size);
        CHECK_THROWS_MATCHES(encode(deny_mr{1, 12, std::string(201, 'x')}, out), std::invalid_argument,
                             Catch::Matchers::Message("agent_protocol::encode: deny_mr.reason is 201 bytes (at most 200)"));
    }
    SECTION("deny_mr.reason is valid UTF-8") {
        check_rejected(deny_mr{1, 12, "ab\x80"}, "deny_mr.reason is not valid UTF-8 at byte 2");      // lone continuation
        check_rejected(deny_mr{1, 12, "\xc0\x80"}, "deny_mr.reason is not valid UTF-8 at byte 0");    // overlong NUL
        check_rejected(deny_mr{1, 12, "\xe0\x80\xaf"}, "deny_mr.reason is not valid UTF-8 at byte 0"); // overlong '/'
        check_rejected(deny_mr{1, 12, "x\xed\xa0\x80"}, "deny_mr.reason is not valid UTF-8 at byte 1"); // surrogate
        check_rejected(deny_mr{1, 12, "\xf4\x90\x80\x80"}, "deny_mr.reason is not valid UTF-8 at byte 0"); // > U+10FFFF
        check_rejected(deny_mr{1, 12, "\xf5\x80\x80\x80"}, "deny_mr.reason is not valid UTF-8 at byte 0");
        check_rejected(deny_mr{1, 12, "ok\xe2\x82"}, "deny_mr.reason is not valid UTF-8 at byte 2");  // cut short
        check_rejected(deny_mr{1, 12, "\xe2\x28\xa1"}, "deny_mr.reason is not valid UTF-8 at byte 0");
        CHECK_NOTHROW(decode(wire(deny_mr{1, 12, "\xf4\x8f\xbf\xbf \xef\xbf\xbd \xc2\xa0"})));
    }
    SECTION("deny_mr.reason is one line: no NUL or other control characters") {
        check_rejected(deny_mr{1, 12, std::string("a\0b", 3)}, "deny_mr.reason has control character 0x00 at byte 1");
        check_rejected(deny_mr{1, 12, "line\nforged log line"}, "deny_mr.reason has control character 0x0a at byte 4");
        check_rejected(deny_mr{1, 12, "\x1b[31mred"}, "deny_mr.reason has control character 0x1b at byte 0");
        check_rejected(deny_mr{1, 12, "del\x7f"}, "deny_mr.reason has control character 0x7f at byte 3");
    }
    SECTION("return_mr, release_mr and revoke_mr name a nonzero region") {
        check_rejected(return_mr{0}, "return_mr.region_id is 0");
        check_rejected(release_mr{{0}}, "release_mr.region_ids[0] is 0");
        check_rejected(release_mr{{5, 6, 0}}, "release_mr.region_ids[2] is 0");
        check_rejected(release_mr{}, "release_mr.count 0 is not 1 to 30");
        check_rejected(release_mr{ids(max_release_batch + 1)}, "release_mr.count 31 is not 1 to 30");
        check_rejected(revoke_mr{0}, "revoke_mr.region_id is 0");
    }
}

TEST_CASE("fit_reason turns any text into a reason deny_mr can carry", "[agent_protocol]") {
    CHECK(fit_reason("over the limit") == "over the limit");
    CHECK(fit_reason("mémoire — 内存 🙂") == "mémoire — 内存 🙂");
    CHECK(fit_reason(std::string("a\nb\0c\x1b[0m\x7f", 10)) == "a b c [0m ");
    CHECK(fit_reason("\xff\xc3\xa9\xc3") == "?é?");
    CHECK(fit_reason("\xed\xa0\x80") == "???");
    CHECK(fit_reason(std::string(200, 'x')) == std::string(200, 'x'));
    CHECK(fit_reason(std::string(300, 'x')) == std::string(197, 'x') + "...");
    CHECK(fit_reason(std::string(199, 'x') + "é") == std::string(197, 'x') + "...");
    CHECK(fit_reason(std::string(196, 'x') + "🙂🙂") == std::string(196, 'x') + "...");
    CHECK(fit_reason("") == "");

    // Whatever goes in, encode takes what comes out.
    std::uint32_t seed = 12345;
    for (int i = 0; i < 2000; ++i) {
        std::string text(seed % 400, '\0');
        for (auto& c : text) {
            seed = seed * 1103515245 + 12345;
            c = static_cast<char>(seed >> 16);
        }
        auto reason = fit_reason(text);
        REQUIRE(reason.size() <= max_reason_length);
        REQUIRE_NOTHROW(wire(deny_mr{1, 12, reason}));
    }
}

TEST_CASE("encode needs a max_message_size buffer and never writes past it", "[agent_protocol]") {
    bytes small(max_message_size - 1);
    CHECK_THROWS_MATCHES(encode(revoke_mr{1}, small), std::invalid_argument,
                         Catch::Matchers::Message("agent_protocol::encode: the output buffer is 255 bytes "
                                                  "(needs max_message_size, 256)"));
    // The longest message, into a buffer with a guard zone after the limit.
    bytes big(max_message_size + 64, std::byte{0xa5});
    auto n = encode(deny_mr{1, 12, std::string(max_reason_length, 'x')}, std::span(big).first(max_message_size));
    CHECK(n == 218);
    for (std::size_t i = n; i < big.size(); ++i)
        REQUIRE(big[i] == std::byte{0xa5});
}

TEST_CASE("a message cut short or padded is a protocol_error at every length", "[agent_protocol]") {
    std::size_t checked = 0;
    for (const auto& m : samples()) {
        auto w = wire(m);
        INFO(to_string(type_of(m)) << ", " << w.size() << " bytes");
        for (std::size_t n = 0; n < w.size(); ++n) {
            INFO("cut to " << n << " bytes");
            bytes cut(w.begin(), w.begin() + n);
            if (n < 8)
                REQUIRE(decode_error(cut) == "agent message: " + std::to_string(n) + " bytes is shorter than the 8-byte header");
            else
                REQUIRE_THAT(decode_error(cut), Catch::Matchers::Contains("header says body_length"));
            // The same cut with body_length patched to agree: the type's own
            // size check has to catch it.
            if (n >= 8) {
                cut[4] = static_cast<std::byte>(n - 8);
                cut[5] = static_cast<std::byte>((n - 8) >> 8);
                // A grant's body length says how many rail keys follow: cut
                // after a whole key, it is a grant with fewer.
                if (const auto* g = std::get_if<grant_mr>(&m); g && n >= 48 && (n - 48) % 4 == 0) {
                    grant_mr fewer = *g;
                    fewer.rails = static_cast<std::uint8_t>(1 + (n - 48) / 4);
                    for (std::size_t k = fewer.rails - 1; k < fewer.rail_rkeys.size(); ++k)
                        fewer.rail_rkeys[k] = 0;
                    REQUIRE(decode(cut) == message(fewer));
                    ++checked;
                    continue;
                }
                REQUIRE_THAT(decode_error(cut), Catch::Matchers::StartsWith("agent message: ") &&
                                                    (Catch::Matchers::Contains(" body is ") ||
                                                     Catch::Matchers::Contains("reason_length")));
            }
            ++checked;
        }
        auto padded = w;
        padded.push_back(std::byte{0});
        REQUIRE_THAT(decode_error(padded), Catch::Matchers::Contains("header says body_length"));
    }
    CHECK(checked > 300);
}

TEST_CASE("every single-byte corruption decodes to a valid message or is a protocol_error", "[agent_protocol]") {
    std::size_t accepted = 0, rejected = 0;
    for (const auto& m : samples()) {
        const auto w = wire(m);
        for (std::size_t at = 0; at < w.size(); ++at) {
            for (int v = 0; v < 256; ++v) {
                auto bad = w;
                if (bad[at] == static_cast<std::byte>(v))
                    continue;
                bad[at] = static_cast<std::byte>(v);
                frame got;
                try {
                    got = decode_frame(bad);
                } catch (const protocol_error&) {
                    ++rejected;
                    continue;
                }
                // Anything decode accepts keeps every rule (encode takes it
                // back), and has exactly one encoding: the bytes it came from.
                ++accepted;
                if (wire(got.body, got.acked) != bad) {
                    INFO(to_string(type_of(m)) << ": byte " << at << " set to " << v);
                    FAIL("a decoded corruption did not re-encode to the same bytes");
                }
            }
        }
    }
    INFO(accepted << " accepted, " << rejected << " rejected");
    CHECK(accepted > 0);
    CHECK(rejected > 0);
}
