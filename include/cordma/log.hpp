#pragma once
/// \file
/// cordma's log: the lines the library writes when something happens that no
/// caller is there to be told about (a peer that broke a protocol and was
/// cut off, a client a listener refused or dropped, a setting the device
/// cannot honour, an internal failure), and where they go.
///
/// By default they go to stderr, one line each, at log_level::warning and
/// above. The environment variable CORDMA_LOG (debug, info, warning, error or
/// off), read once at the first message, sets the starting level without
/// recompiling; set_log_level overrides it. set_log_sink sends the lines to
/// the program's own logger instead.
///
///     cordma::set_log_sink([](cordma::log_level level, std::string_view line) {
///         spdlog::log(level >= cordma::log_level::error ? spdlog::level::err : spdlog::level::warn,
///                     "{}", line);
///     });
///     cordma::set_log_level(cordma::log_level::info);
///
/// A line is the text alone, without a trailing newline, and names its
/// subject first ("cordma: listener 10.0.0.1:7471: refused a client from
/// 10.0.0.2:40512: ...").
///
/// Not logged here: the message cordma prints right before std::terminate
/// (a task_group destroyed unjoined, a spawn_detached task that failed with
/// the default handler) goes to stderr whatever the sink and level, as the
/// last words of a dying program should.

#include <cordma/export.hpp>

#include <functional>
#include <string_view>

namespace cordma {

/// How much a log line matters, least first. A level given to
/// set_log_level lets through lines at that level and above.
enum class log_level {
    /// Step by step detail for finding a problem: connections made and
    /// accepted, listeners opened.
    debug,
    /// Worth knowing but expected in normal operation.
    info,
    /// Something went wrong outside this program or against its settings
    /// and cordma carried on: a peer broke a protocol or went away mid-way
    /// and only its connection was closed, a client was refused or dropped,
    /// a setting the device cannot honour. The default level.
    warning,
    /// cordma itself failed to do something it had to (post a receive
    /// again, shut a queue pair down, run a handler), or is about to
    /// terminate the program.
    error,
    /// As a level: nothing is logged. Never the level of a line.
    off,
};

/// What receives each log line that passes the level: its level and its
/// text (no trailing newline), valid only during the call; copy it to keep
/// it.
///
/// Threads: called on whichever thread logs, often an event_listener's
/// thread (where it holds up every completion of that device until it
/// returns) and sometimes several threads at once, so it must be
/// thread-safe and quick. It is never called with any lock of cordma's
/// held, so it may call into cordma; a line that cordma logs while the sink
/// is running on the same thread (the sink itself made cordma log) goes to
/// stderr rather than into the sink again. It should not throw: if it does,
/// the line and the exception's message go to stderr.
using log_sink = std::function<void(log_level level, std::string_view line)>;

/// Sends every log line from now on to `sink`; an empty sink restores the
/// default (stderr). Safe to call from any thread, while cordma runs. When
/// it returns, the previous sink is no longer running on any other thread
/// and is never called again, so what it refers to may be destroyed; it
/// waits for calls of the previous sink already under way to return (if
/// called from inside the sink, for all but its own). Throws what copying
/// the sink throws (std::bad_alloc), leaving the previous sink in place.
CORDMA_API void set_log_sink(log_sink sink);

/// Lets lines at `level` and above through to the sink from now on;
/// log_level::off silences cordma entirely. Overrides CORDMA_LOG. Any
/// thread, any time; a line being written meanwhile may still see the old
/// level.
CORDMA_API void set_log_level(log_level level) noexcept;

/// The level set by set_log_level, else by CORDMA_LOG, else
/// log_level::warning. Any thread.
CORDMA_API log_level current_log_level() noexcept;

/// Writes `line` at `level` through the sink, if the level lets it through.
/// This is what cordma's own code calls; programs and modules built on
/// cordma may call it too, to share its destination. Never throws; any
/// thread; `level` must not be log_level::off (such a line is dropped).
CORDMA_API void log(log_level level, std::string_view line) noexcept;

/// The level's name as CORDMA_LOG spells it: "debug", "info", "warning",
/// "error" or "off".
CORDMA_API std::string_view to_string(log_level level) noexcept;

}  // namespace cordma
