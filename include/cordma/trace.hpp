#pragma once
/// \file
/// Following one request across processes: a caller-given trace id (W3C
/// Trace Context's 16-byte trace-id) that an rpc call carries in its
/// request frame to the server's handler, that both ends' stuck reports
/// show, and that a program's own tracer hears about through a span hook
/// (no tracing library required, none linked).
///
/// ```
/// cordma::call_options o;
/// o.trace = cordma::trace_id::parse("4bf92f3577b34da6a3ce929d0e0e4736").value();
/// co_await client.call(3, bytes, o);
/// // on the server, in the handler of method 3:
/// //   r.trace() == that id (r.trace().to_string() for a log line);
/// //   pass it on to the calls the handler makes in turn.
///
/// cordma::set_span_hook({.open = [](void* me, const cordma::span_info& s) -> std::uint64_t {
///                            return static_cast<my_tracer*>(me)->begin(s.trace, s.name); },
///                        .close = [](void* me, std::uint64_t span, const cordma::span_info&,
///                                    const std::error_code& outcome) {
///                            static_cast<my_tracer*>(me)->end(span, outcome); },
///                        .context = &tracer});
/// ```
///
/// Operations without a trace id (the default) carry none: their frames are
/// as before, and the hook is not called for them (the cost of an untraced
/// call is one test of 16 bytes). docs/observability.md, "Trace ids".

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <cordma/export.hpp>

namespace cordma {

/// A trace id: 16 bytes naming one request's path through every process
/// it touches (W3C Trace Context's trace-id). All zero is "no trace" (the
/// default), as the W3C format has it. A plain value.
class CORDMA_API trace_id {
public:
    /// No trace.
    constexpr trace_id() noexcept = default;
    /// The id of these bytes (all zero: no trace).
    explicit constexpr trace_id(const std::array<std::byte, 16>& bytes) noexcept : bytes_(bytes) {}

    /// `text` as a trace id: 32 hexadecimal digits (either case), or a
    /// whole W3C `traceparent` value ("00-<32 digits>-<16 digits>-<2
    /// digits>", whose trace-id it takes). Nothing for anything else, and
    /// for the all-zero id (invalid in W3C's format).
    static std::optional<trace_id> parse(std::string_view text) noexcept;
    /// A new random id (16 bytes from the system's random source), for a
    /// program that starts traces without a tracer of its own.
    static trace_id random();

    /// True for "no trace" (all zero).
    constexpr bool empty() const noexcept {
        for (std::byte b : bytes_)
            if (b != std::byte{0})
                return false;
        return true;
    }
    /// True for a trace (not empty()).
    constexpr explicit operator bool() const noexcept { return !empty(); }
    /// The 16 bytes, as they travel (the hex text's order).
    constexpr const std::array<std::byte, 16>& bytes() const noexcept { return bytes_; }
    /// 32 lowercase hexadecimal digits, as W3C's traceparent writes them
    /// ("" for no trace).
    std::string to_string() const;

    /// Equal bytes.
    friend constexpr bool operator==(const trace_id&, const trace_id&) noexcept = default;

private:
    std::array<std::byte, 16> bytes_{};
};

/// What a traced operation is, for a span hook.
enum class span_kind : std::uint8_t {
    /// An rpc call, on the client: from the call to its answer.
    rpc_call,
    /// An rpc call, on the server: from its request's arrival to the
    /// answer's send completing (its handler in between).
    rpc_handler,
    /// A stream write (stream::set_trace): from the call to its return.
    stream_write,
    /// A group's collective on this rank (group_call::trace): from the
    /// call to its end.
    collective,
};

/// "rpc_call", "rpc_handler", "stream_write", "collective".
CORDMA_API const char* to_string(span_kind kind) noexcept;

/// One traced operation, as a span hook sees it. The views are valid only
/// during the hook's call: copy what is kept.
struct span_info {
    /// What it is.
    span_kind kind = span_kind::rpc_call;
    /// The caller's trace id (never empty: untraced operations open none).
    trace_id trace{};
    /// The rpc method's number (0 for the others).
    std::uint32_t method = 0;
    /// What the operation is called: the server's name for the method
    /// (rpc_handler; "" for a method without a handler), "method 3" on the
    /// client (which does not know the server's names), "stream write",
    /// the collective's name ("all_reduce").
    std::string_view name;
    /// The other end's address, as logs and metrics name it (a collective:
    /// "rank 1 of 4").
    std::string_view peer;
    /// The call's number on its connection (the client's choice; a server
    /// sees the same number); a collective's number in its group (the same
    /// on every rank); 0 for a stream write.
    std::uint64_t id = 0;
    /// The request's bytes, or the write's (0 for a collective).
    std::uint64_t bytes = 0;
};

/// A program's tracer, told when each traced operation begins and ends
/// (set_span_hook). `open` returns a number of its choosing (a span id,
/// a pointer) that `close` gets back; both run on the thread the
/// operation runs on (an event listener's: return quickly, block never)
/// and must not throw. Either may be null.
struct span_hook {
    /// The operation `span` began; returns what close() gets as `handle`.
    std::uint64_t (*open)(void* context, const span_info& span) = nullptr;
    /// The operation ended: `outcome` is empty on success, else the error
    /// (an rpc_errc: timed_out, handler_failed, server_gone, ...).
    void (*close)(void* context, std::uint64_t handle, const span_info& span,
                  const std::error_code& outcome) = nullptr;
    /// Given to both, as is.
    void* context = nullptr;
};

/// Installs `hook` for the whole process (replacing the one before; a hook
/// with both functions null removes it). Any thread. A traced operation
/// uses the hook that was set when it began for its close as well, so a
/// replaced hook's context must stay valid until the operations in
/// progress have ended (a program sets its hook once, at start, usually).
/// Throws std::bad_alloc if the hook cannot be stored (the one before stays).
CORDMA_API void set_span_hook(const span_hook& hook);

}  // namespace cordma
