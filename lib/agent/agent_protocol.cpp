#include "agent/agent_protocol.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <string_view>

#include <infiniband/verbs.h>

#include "wire/byte_codec.hpp"

// The layout is documented byte by byte in docs/agent-protocol.md; change
// both together, and bump `version` for anything an old peer would misread.

namespace cordma::detail::agent_protocol {
namespace {

constexpr std::size_t header_size = 8;
// Body sizes. deny_mr's is its fixed part; reason_length bytes follow it.
constexpr std::size_t request_body_size = 4 + 8 + 4 + 4 + 4;
constexpr std::size_t grant_body_size = 4 + 8 + 8 + 8 + 4 + 4 + 4;
constexpr std::size_t deny_fixed_size = 4 + 4 + 2;
constexpr std::size_t region_body_size = 8;
// release_mr: a u16 count, then the ids.
constexpr std::size_t release_fixed_size = 2;

// A grant over rails: a key per rail 1.. after the fixed part.
constexpr std::size_t max_grant_rail_keys = 3;
static_assert(header_size + grant_body_size + 4 * max_grant_rail_keys <= max_message_size);
static_assert(header_size + deny_fixed_size + max_reason_length <= max_message_size);
static_assert(header_size + release_fixed_size + 8 * max_release_batch <= max_message_size);
static_assert(max_message_size <= UINT16_MAX, "body_length is a u16");

constexpr std::uint64_t max_request_size = std::uint64_t{1} << 40;
constexpr std::uint32_t max_alignment = 4096;

// The wire carries the verbs' own bit values, so a peer built against any
// libibverbs reads the same access.
constexpr std::uint32_t remote_write_bit = 2;
constexpr std::uint32_t remote_read_bit = 4;
constexpr std::uint32_t remote_atomic_bit = 8;
constexpr std::uint32_t remote_access_bits = remote_write_bit | remote_read_bit | remote_atomic_bit;
static_assert(IBV_ACCESS_REMOTE_WRITE == remote_write_bit && IBV_ACCESS_REMOTE_READ == remote_read_bit &&
              IBV_ACCESS_REMOTE_ATOMIC == remote_atomic_bit);

static_assert(std::variant_size_v<message> == 7 && static_cast<int>(message_type::ack) == 7,
              "message_type values are the variant's indices plus one");

std::string dec(std::uint64_t v) { return std::to_string(v); }

std::string hex(std::uint64_t v, int digits = 1) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%0*" PRIx64, digits, v);
    return buf;
}

// The field rules, shared by encode (std::invalid_argument: our own bug or
// the caller's) and decode (protocol_error: the peer's). Each returns the
// first problem, or an empty string.

std::string access_problem(const char* field, std::uint32_t access) {
    if (access == 0)
        return std::string(field) + " is 0 (no access)";
    if (access & ~remote_access_bits)
        return std::string(field) + " " + hex(access) +
               " has bits other than remote_write|remote_read|remote_atomic (0xe)";
    return {};
}

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF). Returns the offset of the first bad byte, or npos.
std::size_t invalid_utf8_at(std::string_view s) noexcept {
    std::size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        std::size_t more;
        unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c == 0xE0) {
            more = 2, lo = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            more = 2;
        } else if (c == 0xED) {
            more = 2, hi = 0x9F;
        } else if (c == 0xF0) {
            more = 3, lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            more = 3;
        } else if (c == 0xF4) {
            more = 3, hi = 0x8F;
        } else {
            return i;
        }
        if (s.size() - i - 1 < more)
            return i;
        for (std::size_t k = 1; k <= more; ++k) {
            auto b = static_cast<unsigned char>(s[i + k]);
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                return i;
        }
        i += more + 1;
    }
    return std::string_view::npos;
}

std::string problem(const request_mr& m) {
    // Answers echo the id, and a grant_mr with request_id 0 is unsolicited.
    if (m.request_id == 0)
        return "request_mr.request_id is 0";
    if (m.size == 0)
        return "request_mr.size is 0";
    if (m.size > max_request_size)
        return "request_mr.size " + dec(m.size) + " is over 2^40";
    if (m.alignment == 0)
        return "request_mr.alignment is 0";
    if (!std::has_single_bit(m.alignment) || m.alignment > max_alignment)
        return "request_mr.alignment " + dec(m.alignment) + " is not a power of two from 1 to 4096";
    return access_problem("request_mr.access", m.access);
}

std::string problem(const grant_mr& m) {
    if (m.region_id == 0)
        return "grant_mr.region_id is 0";
    if (m.length == 0)
        return "grant_mr.length is 0";
    if (m.address > UINT64_MAX - m.length)
        return "grant_mr.address " + hex(m.address) + " + length " + hex(m.length) + " overflows 64 bits";
    if (m.lease_ms == 0)
        return "grant_mr.lease_ms is 0";
    if (m.rails < 1 || m.rails > 1 + m.rail_rkeys.size())
        return "grant_mr.rails is " + dec(m.rails) + " (1 to " + dec(1 + m.rail_rkeys.size()) + ")";
    return access_problem("grant_mr.access", m.access);
}

std::string problem(const deny_mr& m) {
    if (m.request_id == 0)
        return "deny_mr.request_id is 0";
    // The code becomes a std::error_code on the requesting side: 0 would read
    // as success, and past INT_MAX it would change sign.
    if (m.code == 0)
        return "deny_mr.code is 0 (a denial needs an error code)";
    if (m.code > INT_MAX)
        return "deny_mr.code " + dec(m.code) + " does not fit an int";
    if (m.reason.size() > max_reason_length)
        return "deny_mr.reason is " + dec(m.reason.size()) + " bytes (at most " + dec(max_reason_length) + ")";
    // The reason ends up in error messages and logs as one line of text.
    if (auto at = invalid_utf8_at(m.reason); at != std::string_view::npos)
        return "deny_mr.reason is not valid UTF-8 at byte " + dec(at);
    for (std::size_t i = 0; i < m.reason.size(); ++i) {
        auto c = static_cast<unsigned char>(m.reason[i]);
        if (c < 0x20 || c == 0x7F)
            return "deny_mr.reason has control character " + hex(c, 2) + " at byte " + dec(i);
    }
    return {};
}

std::string region_problem(const char* type, std::uint64_t region_id) {
    if (region_id == 0)
        return std::string(type) + ".region_id is 0";
    return {};
}
std::string problem(const return_mr& m) { return region_problem("return_mr", m.region_id); }
std::string problem(const release_mr& m) {
    if (m.region_ids.empty() || m.region_ids.size() > max_release_batch)
        return "release_mr.count " + dec(m.region_ids.size()) + " is not 1 to " + dec(max_release_batch);
    for (std::size_t i = 0; i < m.region_ids.size(); ++i)
        if (m.region_ids[i] == 0)
            return "release_mr.region_ids[" + dec(i) + "] is 0";
    return {};
}
std::string problem(const revoke_mr& m) { return region_problem("revoke_mr", m.region_id); }
std::string problem(const ack&) { return {}; }

std::size_t body_size(const request_mr&) noexcept { return request_body_size; }
std::size_t body_size(const grant_mr& m) noexcept {
    return grant_body_size + 4 * static_cast<std::size_t>(m.rails > 1 ? m.rails - 1 : 0);
}
std::size_t body_size(const deny_mr& m) noexcept { return deny_fixed_size + m.reason.size(); }
std::size_t body_size(const return_mr&) noexcept { return region_body_size; }
std::size_t body_size(const release_mr& m) noexcept { return release_fixed_size + 8 * m.region_ids.size(); }
std::size_t body_size(const revoke_mr&) noexcept { return region_body_size; }
std::size_t body_size(const ack&) noexcept { return 0; }

void write_body(byte_writer& w, const request_mr& m) noexcept {
    w.u32(m.request_id);
    w.u64(m.size);
    w.u32(m.alignment);
    w.u32(m.lease_ms);
    w.u32(m.access);
}
void write_body(byte_writer& w, const grant_mr& m) noexcept {
    w.u32(m.request_id);
    w.u64(m.region_id);
    w.u64(m.address);
    w.u64(m.length);
    w.u32(m.rkey);
    w.u32(m.lease_ms);
    w.u32(m.access);
    for (std::size_t i = 0; i + 1 < m.rails; ++i)
        w.u32(m.rail_rkeys[i]);
}
void write_body(byte_writer& w, const deny_mr& m) noexcept {
    w.u32(m.request_id);
    w.u32(m.code);
    w.u16(static_cast<std::uint16_t>(m.reason.size()));
    w.bytes(m.reason);
}
void write_body(byte_writer& w, const return_mr& m) noexcept { w.u64(m.region_id); }
void write_body(byte_writer& w, const release_mr& m) noexcept {
    w.u16(static_cast<std::uint16_t>(m.region_ids.size()));
    for (auto id : m.region_ids)
        w.u64(id);
}
void write_body(byte_writer& w, const revoke_mr& m) noexcept { w.u64(m.region_id); }
void write_body(byte_writer&, const ack&) noexcept {}

[[noreturn]] void fail(const std::string& what) { throw protocol_error("agent message: " + what); }

// Reads the body of a fixed-size type whose length decode has checked.
template <class T>
T read_body(byte_reader& r);

template <>
request_mr read_body(byte_reader& r) {
    request_mr m;
    m.request_id = r.u32();
    m.size = r.u64();
    m.alignment = r.u32();
    m.lease_ms = r.u32();
    m.access = r.u32();
    return m;
}
template <>
grant_mr read_body(byte_reader& r) {
    grant_mr m;
    m.request_id = r.u32();
    m.region_id = r.u64();
    m.address = r.u64();
    m.length = r.u64();
    m.rkey = r.u32();
    m.lease_ms = r.u32();
    m.access = r.u32();
    return m;
}
template <>
return_mr read_body(byte_reader& r) { return return_mr{r.u64()}; }
template <>
revoke_mr read_body(byte_reader& r) { return revoke_mr{r.u64()}; }
template <>
ack read_body(byte_reader&) { return ack{}; }

template <class T>
message checked(T m) {
    if (auto p = problem(m); !p.empty())
        fail(p);
    return m;
}

template <class T>
message decode_fixed(byte_reader& r, message_type type, std::size_t body_length, std::size_t expected) {
    if (body_length != expected)
        fail(std::string(to_string(type)) + " body is " + dec(body_length) + " bytes (expected " + dec(expected) + ")");
    return checked(read_body<T>(r));
}

message decode_grant(byte_reader& r, std::size_t body_length) {
    // The fixed part, then a key per rail 1.. of the owner's (0 to 3).
    std::size_t keys = (body_length - grant_body_size) / 4;
    if (body_length < grant_body_size || (body_length - grant_body_size) % 4 != 0 || keys > max_grant_rail_keys)
        fail("grant_mr body is " + dec(body_length) + " bytes (expected " + dec(grant_body_size) +
             ", plus 4 per rail key, at most " + dec(max_grant_rail_keys) + ")");
    grant_mr m = read_body<grant_mr>(r);
    for (std::size_t i = 0; i < keys; ++i)
        m.rail_rkeys[i] = r.u32();
    m.rails = static_cast<std::uint8_t>(1 + keys);
    return checked(m);
}

message decode_deny(byte_reader& r, std::size_t body_length) {
    if (body_length < deny_fixed_size)
        fail("deny_mr body is " + dec(body_length) + " bytes (at least " + dec(deny_fixed_size) + ")");
    deny_mr m;
    m.request_id = r.u32();
    m.code = r.u32();
    std::size_t reason_length = r.u16();
    // Checked before anything is allocated for the reason.
    if (reason_length > max_reason_length)
        fail("deny_mr.reason_length " + dec(reason_length) + " is over " + dec(max_reason_length));
    if (body_length != deny_fixed_size + reason_length)
        fail("deny_mr body is " + dec(body_length) + " bytes but reason_length " + dec(reason_length) + " needs " +
             dec(deny_fixed_size + reason_length));
    m.reason = r.text(reason_length);
    return checked(std::move(m));
}

message decode_release(byte_reader& r, std::size_t body_length) {
    if (body_length < release_fixed_size)
        fail("release_mr body is " + dec(body_length) + " bytes (at least " + dec(release_fixed_size) + ")");
    std::size_t count = r.u16();
    // Checked before anything is allocated for the ids.
    if (count == 0 || count > max_release_batch)
        fail("release_mr.count " + dec(count) + " is not 1 to " + dec(max_release_batch));
    if (body_length != release_fixed_size + 8 * count)
        fail("release_mr body is " + dec(body_length) + " bytes but count " + dec(count) + " needs " +
             dec(release_fixed_size + 8 * count));
    release_mr m;
    m.region_ids.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
        m.region_ids.push_back(r.u64());
    return checked(std::move(m));
}

}  // namespace

const char* to_string(message_type t) noexcept {
    switch (t) {
    case message_type::request_mr: return "request_mr";
    case message_type::grant_mr: return "grant_mr";
    case message_type::deny_mr: return "deny_mr";
    case message_type::return_mr: return "return_mr";
    case message_type::release_mr: return "release_mr";
    case message_type::revoke_mr: return "revoke_mr";
    case message_type::ack: return "ack";
    }
    return "unknown";
}

std::string fit_reason(std::string_view text) {
    std::string out;
    std::size_t cut = std::string::npos;  // where "..." goes if the text is too long
    std::size_t i = 0;
    while (i < text.size()) {
        // The length of the valid character at i, or 0 for an invalid byte.
        std::size_t n = 1;
        auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x80) {
            n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (n > text.size() - i || invalid_utf8_at(text.substr(i, n)) != std::string_view::npos)
                n = 0;
        }
        if (out.size() + std::max<std::size_t>(n, 1) > max_reason_length - 3 && cut == std::string::npos)
            cut = out.size();
        if (out.size() + std::max<std::size_t>(n, 1) > max_reason_length)
            return out.substr(0, cut) + "...";
        if (n == 0)
            out += '?';
        else if (c < 0x20 || c == 0x7F)
            out += ' ';
        else
            out.append(text.substr(i, n));
        i += std::max<std::size_t>(n, 1);
    }
    return out;
}

std::size_t encode(const message& m, std::span<std::byte> out, std::uint16_t acked) {
    if (out.size() < max_message_size)
        throw std::invalid_argument("agent_protocol::encode: the output buffer is " + dec(out.size()) +
                                    " bytes (needs max_message_size, " + dec(max_message_size) + ")");
    if (m.valueless_by_exception())
        throw std::invalid_argument("agent_protocol::encode: the message is valueless");
    return std::visit(
        [&](const auto& body) {
            if (auto p = problem(body); !p.empty())
                throw std::invalid_argument("agent_protocol::encode: " + p);
            std::size_t length = body_size(body);
            // problem() bounds every variable part, so this always holds.
            assert(header_size + length <= max_message_size);
            byte_writer w(out);
            w.u16(magic);
            w.u8(version);
            w.u8(static_cast<std::uint8_t>(type_of(m)));
            w.u16(static_cast<std::uint16_t>(length));
            w.u16(acked);
            write_body(w, body);
            assert(w.written() == header_size + length);
            return w.written();
        },
        m);
}

frame decode_frame(std::span<const std::byte> in) {
    if (in.size() < header_size)
        fail(dec(in.size()) + " bytes is shorter than the " + dec(header_size) + "-byte header");
    byte_reader r(in);
    // Magic, then version, before anything else: a peer speaking another
    // version may lay out the rest differently, and should be told so.
    if (auto got = r.u16(); got != magic)
        fail("bad magic " + hex(got, 4) + " (expected " + hex(magic, 4) + ")");
    if (auto got = r.u8(); got != version)
        fail("version " + dec(got) + " not supported (this side speaks " + dec(version) + ")");
    auto type_byte = r.u8();
    if (type_byte < 1 || type_byte > std::variant_size_v<message>)
        fail("unknown message type " + dec(type_byte));
    auto type = static_cast<message_type>(type_byte);
    std::size_t body_length = r.u16();
    std::uint16_t acked = r.u16();  // any value: the agent checks it against what it sent
    if (body_length != in.size() - header_size)
        fail(std::string(to_string(type)) + " header says body_length " + dec(body_length) + " but " +
             dec(in.size() - header_size) + " bytes follow");

    auto body = [&]() -> message {
        switch (type) {
        case message_type::request_mr: return decode_fixed<request_mr>(r, type, body_length, request_body_size);
        case message_type::grant_mr: return decode_grant(r, body_length);
        case message_type::deny_mr: return decode_deny(r, body_length);
        case message_type::return_mr: return decode_fixed<return_mr>(r, type, body_length, region_body_size);
        case message_type::release_mr: return decode_release(r, body_length);
        case message_type::revoke_mr: return decode_fixed<revoke_mr>(r, type, body_length, region_body_size);
        case message_type::ack: return decode_fixed<ack>(r, type, body_length, 0);
        }
        fail("unknown message type " + dec(type_byte));  // not reached: checked above
    };
    return frame{body(), acked};
}

}  // namespace cordma::detail::agent_protocol
