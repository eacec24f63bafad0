// trace ids (trace.hpp): parsing W3C's forms, printing them back, random
// ones, and the span hook's open/close pairing. No device needed; the rpc
// frames that carry them are wire_formats_test's, their journey through a
// server rpc_test's.
#include <cordma/trace.hpp>

#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "core/trace_span.hpp"

using namespace cordma;

TEST_CASE("a trace id parses from 32 hex digits or a traceparent, and prints back in lowercase", "[trace]") {
    auto id = trace_id::parse("4BF92F3577B34DA6A3CE929D0E0E4736");
    REQUIRE(id);
    CHECK(id->to_string() == "4bf92f3577b34da6a3ce929d0e0e4736");
    CHECK(id->bytes()[0] == std::byte{0x4b});
    CHECK(id->bytes()[15] == std::byte{0x36});
    CHECK(static_cast<bool>(*id));

    auto from_header = trace_id::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    REQUIRE(from_header);
    CHECK(*from_header == *id);

    CHECK_FALSE(trace_id::parse(""));
    CHECK_FALSE(trace_id::parse("4bf92f3577b34da6a3ce929d0e0e473"));    // 31 digits
    CHECK_FALSE(trace_id::parse("4bf92f3577b34da6a3ce929d0e0e47361"));  // 33
    CHECK_FALSE(trace_id::parse("4bf92f3577b34da6a3ce929d0e0e473g"));   // not hex
    CHECK_FALSE(trace_id::parse("00000000000000000000000000000000"));   // W3C: invalid
    CHECK_FALSE(trace_id::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bx-01"));
    CHECK_FALSE(trace_id::parse("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));

    trace_id none;
    CHECK(none.empty());
    CHECK_FALSE(static_cast<bool>(none));
    CHECK(none.to_string().empty());
    CHECK(none != *id);
}

TEST_CASE("random trace ids are never empty and do not repeat", "[trace]") {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        trace_id t = trace_id::random();
        CHECK_FALSE(t.empty());
        seen.insert(t.to_string());
    }
    CHECK(seen.size() == 1000);
}

namespace {

struct recorder {
    std::uint64_t next = 100;
    std::vector<std::string> events;
};

std::uint64_t record_open(void* context, const span_info& s) {
    auto* r = static_cast<recorder*>(context);
    r->events.push_back(std::string("open ") + to_string(s.kind) + " " + s.trace.to_string() + " " +
                        std::string(s.name));
    return r->next++;
}

void record_close(void* context, std::uint64_t handle, const span_info& s, const std::error_code& outcome) {
    auto* r = static_cast<recorder*>(context);
    r->events.push_back("close " + std::to_string(handle) + " " + std::string(s.name) + " " +
                        (outcome ? outcome.message() : "ok"));
}

}  // namespace

TEST_CASE("a span closes through the hook it opened under, with the handle its open returned", "[trace]") {
    recorder first, second;
    set_span_hook({&record_open, &record_close, &first});
    span_info info;
    info.kind = span_kind::rpc_handler;
    info.trace = *trace_id::parse("0af7651916cd43dd8448eb211c80319c");
    info.name = "echo";
    detail::traced_span a;
    a.open(info);
    CHECK(a.is_open());
    // Replaced meanwhile: `a` still closes through the first.
    set_span_hook({&record_open, &record_close, &second});
    detail::traced_span b;
    b.open(info);
    a.close(info, std::make_error_code(std::errc::timed_out));
    CHECK_FALSE(a.is_open());
    a.close(info, {});  // once only
    b.close(info, {});
    REQUIRE(first.events.size() == 2);
    CHECK(first.events[0] == "open rpc_handler 0af7651916cd43dd8448eb211c80319c echo");
    CHECK(first.events[1] == "close 100 echo " + std::make_error_code(std::errc::timed_out).message());
    REQUIRE(second.events.size() == 2);
    CHECK(second.events[1] == "close 100 echo ok");

    // Removed: nothing opens.
    set_span_hook({});
    detail::traced_span c;
    c.open(info);
    CHECK_FALSE(c.is_open());
    c.close(info, {});
    CHECK(second.events.size() == 2);
}
