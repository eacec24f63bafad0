// libFuzzer target for the private data of cordma's rdma_cm handshakes
// (lib/connect/rdma_cm/cm_hello.hpp, docs/wire-formats.md): cm_hello in a
// connect request, cm_reply in an accept, cm_refusal in a reject.
//
// A peer controls every byte the three `from` functions read: whatever
// private data its connect request, accept or reject carries, which the
// event listener copies into a cm_event_copy (at most 196 bytes, with
// private_data_len saying how many came). So `from` must never read past
// what came: the answer must not depend on the bytes of the array after
// private_data_len (checked by decoding each input twice, the rest of the
// array zero and then 0xa5). And whatever it accepts must be exactly what
// cordma's own side writes: a fresh struct given only the decoded meaning
// (a hello's kind, MTU and token; a reply's MTU; a refusal's reason) must
// have the input's bytes, so neither a stray version nor a reserved byte
// slips past; each field must be in its documented range. The same bytes
// are given to all three, as any of them may meet any private data. Any
// breach aborts, which libFuzzer reports as a crash with the input saved.
//
// The input is the private data: private_data_len is its length, capped at
// the array's 196 bytes, as the event listener caps it.
//
// Built and run by fuzz/run-fuzz --target cm_hello (the `cm_hello_fuzz`
// test).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "connect/rdma_cm/cm_hello.hpp"

namespace cd = cordma::detail;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail = {}) {
    std::fprintf(stderr, "cm_hello_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

// The event the listener would hand over for these bytes, the array after
// them filled with `rest`.
std::unique_ptr<cd::cm_event_copy> event_of(const std::uint8_t* data, std::size_t size, std::uint8_t rest) {
    auto e = std::make_unique<cd::cm_event_copy>();
    e->type = RDMA_CM_EVENT_CONNECT_REQUEST;
    std::size_t n = std::min(size, cd::cm_event_copy::max_private_data);
    e->private_data_len = static_cast<std::uint8_t>(n);
    std::fill(e->private_data.begin(), e->private_data.end(), rest);
    if (n != 0)
        std::memcpy(e->private_data.data(), data, n);
    return e;
}

template <class T>
bool same(const std::optional<T>& a, const std::optional<T>& b) {
    return a.has_value() == b.has_value() && (!a || a->bytes() == b->bytes());
}

// `from` on both events: the same answer, and an accepted one is `fresh`
// byte for byte and at the start of the private data that came.
template <class T, class Fresh>
void check(const char* what, const cd::cm_event_copy& zeros, const cd::cm_event_copy& marked, Fresh fresh) {
    std::optional<T> a, b;
    try {
        a = T::from(zeros);
        b = T::from(marked);
    } catch (const std::exception& e) {
        // Called on the event listener's thread, from noexcept handlers.
        die((std::string(what) + "::from threw").c_str(), e.what());
    }
    if (!same(a, b))
        die((std::string(what) + "::from read private data past private_data_len").c_str(),
            std::to_string(zeros.private_data_len) + " bytes came");
    if (!a)
        return;
    if (zeros.private_data_len < T::size)
        die((std::string(what) + "::from accepted less private data than its size").c_str(),
            std::to_string(zeros.private_data_len) + " bytes");
    auto expected = fresh(*a).bytes();
    if (std::memcmp(expected.data(), zeros.private_data.data(), expected.size()) != 0)
        die((std::string(what) + "::from accepted bytes that cordma never writes (version, reserved)").c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto zeros = event_of(data, size, 0);
    auto marked = event_of(data, size, 0xa5);

    check<cd::cm_hello>("cm_hello", *zeros, *marked, [](const cd::cm_hello& got) {
        if (got.kind != cd::cm_hello::data && got.kind != cd::cm_hello::control)
            die("cm_hello::from accepted an unknown kind", std::to_string(got.kind));
        if (got.mtu > IBV_MTU_4096)
            die("cm_hello::from accepted an MTU code above 5", std::to_string(got.mtu));
        if ((got.token & 1) == 0)
            die("cm_hello::from accepted an even token (a hello cut short arrives with token 0)");
        cd::cm_hello h;
        h.kind = got.kind;
        h.mtu = got.mtu;
        h.token = got.token;
        return h;
    });
    check<cd::cm_reply>("cm_reply", *zeros, *marked, [](const cd::cm_reply& got) {
        if (got.mtu < IBV_MTU_256 || got.mtu > IBV_MTU_4096)
            die("cm_reply::from accepted an MTU code outside 1..5", std::to_string(got.mtu));
        cd::cm_reply r;
        r.mtu = got.mtu;
        return r;
    });
    check<cd::cm_refusal>("cm_refusal", *zeros, *marked, [](const cd::cm_refusal& got) {
        if (got.reason != cd::cm_refusal::listener_without_agent && got.reason != cd::cm_refusal::listener_with_agent &&
            got.reason != cd::cm_refusal::backlog_full)
            die("cm_refusal::from accepted an unknown reason", std::to_string(got.reason));
        if ((got.reason == cd::cm_refusal::backlog_full) != (got.backlog != 0))
            die("cm_refusal::from accepted a backlog with the wrong reason, or a full backlog of 0",
                std::to_string(got.backlog));
        cd::cm_refusal r;
        r.reason = got.reason;
        r.backlog = got.backlog;
        return r;
    });
    return 0;
}
