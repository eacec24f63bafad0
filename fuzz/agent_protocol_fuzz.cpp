// libFuzzer target for the agent's wire format (docs/agent-protocol.md).
//
// A peer controls every byte the agent decodes, so decode must never read
// out of bounds, allocate without bound, or fail with anything but
// protocol_error. Beyond not crashing, whatever decode accepts must keep
// every rule (encode takes it back without std::invalid_argument) and must
// have exactly one encoding: re-encoding gives back the input's bytes, and
// decoding those gives the same message. fit_reason is held to its promise
// on the same bytes read as text. Any breach aborts, which libFuzzer
// reports as a crash with the input saved.
//
// Built and run by fuzz/run-fuzz (the `agent_protocol_fuzz` test).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include "agent/agent_protocol.hpp"

namespace ap = cordma::detail::agent_protocol;

namespace {

[[noreturn]] void die(const char* what, const char* detail = "") {
    std::fprintf(stderr, "agent_protocol_fuzz: %s%s%s\n", what, *detail ? ": " : "", detail);
    std::abort();
}

// fit_reason makes any text a reason encode accepts, and leaves alone a
// reason that already was one.
void check_fit_reason(std::string_view text) {
    std::byte out[ap::max_message_size];
    bool was_valid = true;
    try {
        (void)ap::encode(ap::deny_mr{1, 12, std::string(text)}, out);
    } catch (const std::invalid_argument&) {
        was_valid = false;
    }
    std::string reason = ap::fit_reason(text);
    try {
        (void)ap::encode(ap::deny_mr{1, 12, reason}, out);
    } catch (const std::exception& e) {
        die("encode refused what fit_reason made", e.what());
    }
    if (was_valid && reason != text)
        die("fit_reason changed a reason that was already valid");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    check_fit_reason(std::string_view(reinterpret_cast<const char*>(data), size));

    std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
    ap::message m;
    std::uint16_t acked = 0;
    try {
        auto f = ap::decode_frame(in);
        m = std::move(f.body);
        acked = f.acked;
    } catch (const ap::protocol_error&) {
        return 0;
    } catch (const std::exception& e) {
        die("decode threw something other than protocol_error", e.what());
    }

    std::byte out[ap::max_message_size];
    std::size_t n = 0;
    try {
        n = ap::encode(m, out, acked);
    } catch (const std::exception& e) {
        die("decode accepted a message that encode refuses", e.what());
    }
    if (n != size || std::memcmp(out, data, size) != 0)
        die("re-encoding a decoded message changed its bytes", ap::to_string(ap::type_of(m)));

    try {
        if (ap::decode(std::span<const std::byte>(out, n)) != m)
            die("decode(encode(m)) != m", ap::to_string(ap::type_of(m)));
    } catch (const std::exception& e) {
        die("decode refused what encode wrote", e.what());
    }
    return 0;
}
