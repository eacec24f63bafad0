// log: where cordma's log lines go (include/cordma/log.hpp): the level, the
// user's sink, the default one (stderr), and CORDMA_LOG.
#include <cordma/log.hpp>

#include "log/logf.hpp"

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace cordma {
namespace {

constexpr int level_unset = -1;
std::atomic<int> level_{level_unset};

// The installed sink. Every copy, reset and swap of `sink` happens under
// `mutex`, so that its use_count() there tells exactly how many threads are
// calling it: set_log_sink waits on `returned` until only it still holds the
// sink it replaced. The sink itself is never called under the mutex. Made
// once and never destroyed: cordma may log while the program exits, after
// any static destructor has run.
struct sink_state {
    std::mutex mutex;
    std::condition_variable returned;
    std::shared_ptr<const log_sink> sink;  // null: stderr
};

sink_state& state() {
    static sink_state* s = new sink_state;
    return *s;
}

// The sink this thread is running, if any: a line logged from inside it goes
// to stderr, not into the sink again.
thread_local const log_sink* running_here = nullptr;

void write_stderr(std::string_view line) noexcept {
    // One call, so that lines from several threads do not interleave.
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size())
        return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != b[i])
            return false;
    return true;
}

// CORDMA_LOG's level; warning if unset, empty or not a level (said once, by
// the caller that wins the race to set the level).
int level_from_environment(std::string& complaint) {
    const char* value = std::getenv("CORDMA_LOG");
    if (!value || !*value)
        return static_cast<int>(log_level::warning);
    for (log_level l : {log_level::debug, log_level::info, log_level::warning, log_level::error, log_level::off})
        if (iequals(value, to_string(l)))
            return static_cast<int>(l);
    complaint = std::string("cordma: CORDMA_LOG=") + value +
                " is not a log level (debug, info, warning, error or off); logging at warning";
    return static_cast<int>(log_level::warning);
}

}  // namespace

std::string_view to_string(log_level level) noexcept {
    switch (level) {
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warning: return "warning";
    case log_level::error: return "error";
    case log_level::off: return "off";
    }
    return "off";
}

log_level current_log_level() noexcept {
    int level = level_.load(std::memory_order_relaxed);
    if (level != level_unset)
        return static_cast<log_level>(level);
    std::string complaint;
    int from_environment;
    try {
        from_environment = level_from_environment(complaint);
    } catch (...) {  // std::bad_alloc making the complaint
        from_environment = static_cast<int>(log_level::warning);
    }
    // set_log_level may have run meanwhile: it wins.
    if (level_.compare_exchange_strong(level, from_environment, std::memory_order_relaxed) && !complaint.empty())
        write_stderr(complaint);
    return static_cast<log_level>(level_.load(std::memory_order_relaxed));
}

void set_log_level(log_level level) noexcept {
    level_.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_log_sink(log_sink sink) {
    std::shared_ptr<const log_sink> fresh;
    if (sink)
        fresh = std::make_shared<const log_sink>(std::move(sink));
    sink_state& s = state();
    std::shared_ptr<const log_sink> old;
    {
        std::unique_lock lock(s.mutex);
        old = std::exchange(s.sink, std::move(fresh));
        if (old) {
            // Ours, plus the caller's own call if the sink replaces itself.
            long ours = running_here == old.get() ? 2 : 1;
            s.returned.wait(lock, [&] { return old.use_count() <= ours; });
        }
    }
    // `old` is destroyed here, outside the lock, unless the sink replaced
    // itself: then by log() once it has returned.
}

void log(log_level level, std::string_view line) noexcept {
    if (level == log_level::off || static_cast<int>(level) < static_cast<int>(current_log_level()))
        return;
    if (running_here) {
        write_stderr(line);
        return;
    }
    sink_state& s = state();
    std::shared_ptr<const log_sink> sink;
    {
        std::lock_guard lock(s.mutex);
        sink = s.sink;
    }
    if (!sink) {
        write_stderr(line);
        return;
    }
    running_here = sink.get();
    try {
        (*sink)(level, line);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%.*s\ncordma: the log sink threw: %s\n", static_cast<int>(line.size()), line.data(),
                     e.what());
    } catch (...) {
        std::fprintf(stderr, "%.*s\ncordma: the log sink threw an exception not derived from std::exception\n",
                     static_cast<int>(line.size()), line.data());
    }
    running_here = nullptr;
    std::shared_ptr<const log_sink> last;
    {
        std::lock_guard lock(s.mutex);
        // The last holder (the sink was replaced from inside itself) destroys
        // it below, outside the lock: its destructor may log.
        if (sink.use_count() == 1)
            last = std::move(sink);
        else
            sink.reset();
        s.returned.notify_all();
    }
}

namespace detail {

void logf(log_level level, const char* format, ...) noexcept {
    if (level == log_level::off || static_cast<int>(level) < static_cast<int>(current_log_level()))
        return;
    char small[512];
    std::va_list args;
    va_start(args, format);
    int n = std::vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (n < 0)
        return cordma::log(level, format);  // an encoding error: the format says what it was about
    if (static_cast<std::size_t>(n) < sizeof small)
        return cordma::log(level, std::string_view(small, static_cast<std::size_t>(n)));
    try {
        std::string line(static_cast<std::size_t>(n), '\0');
        va_start(args, format);
        std::vsnprintf(line.data(), line.size() + 1, format, args);
        va_end(args);
        cordma::log(level, line);
    } catch (...) {  // std::bad_alloc: the start of the line is better than nothing
        cordma::log(level, std::string_view(small, sizeof small - 1));
    }
}

}  // namespace detail
}  // namespace cordma
