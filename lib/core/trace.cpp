// trace: trace ids (parsing, printing, random ones) and the process's span
// hook. A hook, once set, is never freed: an operation that began under it
// closes through it, whichever thread replaces it meanwhile, with no lock
// and no reference count on the traced path.
#include <cordma/trace.hpp>

#include <atomic>
#include <random>

#include "core/trace_span.hpp"

namespace cordma {
namespace {

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool all_hex(std::string_view text) noexcept {
    for (char c : text)
        if (hex_value(c) < 0)
            return false;
    return true;
}

// Every hook ever set, newest first (reachable, so never reported as a
// leak), and the one in force.
struct kept_hook {
    span_hook hook;
    kept_hook* older = nullptr;
};
std::atomic<kept_hook*> every_hook{nullptr};
std::atomic<const span_hook*> installed{nullptr};

}  // namespace

std::optional<trace_id> trace_id::parse(std::string_view text) noexcept {
    // traceparent: version "-" trace-id "-" parent-id "-" flags.
    if (text.size() == 55 && text[2] == '-' && text[35] == '-' && text[52] == '-') {
        if (!all_hex(text.substr(0, 2)) || !all_hex(text.substr(36, 16)) || !all_hex(text.substr(53, 2)))
            return std::nullopt;
        text = text.substr(3, 32);
    }
    if (text.size() != 32 || !all_hex(text))
        return std::nullopt;
    std::array<std::byte, 16> bytes{};
    for (std::size_t i = 0; i < 16; ++i)
        bytes[i] = std::byte(hex_value(text[2 * i]) << 4 | hex_value(text[2 * i + 1]));
    trace_id id(bytes);
    if (id.empty())
        return std::nullopt;
    return id;
}

trace_id trace_id::random() {
    static thread_local std::mt19937_64 engine{std::random_device{}()};
    std::array<std::byte, 16> bytes{};
    do {
        for (std::size_t half = 0; half < 2; ++half) {
            std::uint64_t v = engine();
            for (std::size_t i = 0; i < 8; ++i)
                bytes[half * 8 + i] = std::byte(v >> (8 * i));
        }
    } while (trace_id(bytes).empty());
    return trace_id(bytes);
}

std::string trace_id::to_string() const {
    if (empty())
        return {};
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (std::size_t i = 0; i < 16; ++i) {
        auto b = std::to_integer<unsigned>(bytes_[i]);
        out[2 * i] = digits[b >> 4];
        out[2 * i + 1] = digits[b & 15];
    }
    return out;
}

const char* to_string(span_kind kind) noexcept {
    switch (kind) {
    case span_kind::rpc_call: return "rpc_call";
    case span_kind::rpc_handler: return "rpc_handler";
    case span_kind::stream_write: return "stream_write";
    case span_kind::collective: return "collective";
    }
    return "unknown";
}

void set_span_hook(const span_hook& hook) {
    const span_hook* next = nullptr;
    if (hook.open != nullptr || hook.close != nullptr) {
        auto* kept = new kept_hook{hook};  // kept for good: see the top
        kept->older = every_hook.load(std::memory_order_relaxed);
        while (!every_hook.compare_exchange_weak(kept->older, kept, std::memory_order_release))
            ;
        next = &kept->hook;
    }
    installed.store(next, std::memory_order_release);
}

namespace detail {

void traced_span::open(const span_info& info) noexcept {
    hook_ = installed.load(std::memory_order_acquire);
    if (hook_ != nullptr && hook_->open != nullptr)
        handle_ = hook_->open(hook_->context, info);
}

void traced_span::close(const span_info& info, const std::error_code& outcome) noexcept {
    const span_hook* hook = hook_;
    hook_ = nullptr;
    if (hook != nullptr && hook->close != nullptr)
        hook->close(hook->context, handle_, info, outcome);
}

}  // namespace detail
}  // namespace cordma
