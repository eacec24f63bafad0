// cordma's log hook (cordma/log.hpp, and cordma.h's cordma_set_log_sink):
// levels, the sink, swapping it while other threads log, reentrancy, the
// default on stderr and CORDMA_LOG. No device needed.
#include <catch2/catch.hpp>

#include <cordma/cordma.h>
#include <cordma/log.hpp>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/child_process.hpp"

using cordma::log_level;

namespace {

struct captured_line {
    log_level level;
    std::string text;
};

/// A sink that keeps every line, and puts the default sink and level back
/// when the test is done.
class capture {
public:
    capture() {
        cordma::set_log_sink([this](log_level level, std::string_view line) {
            std::lock_guard lock(mutex_);
            lines_.push_back({level, std::string(line)});
        });
    }
    capture(const capture&) = delete;
    capture& operator=(const capture&) = delete;
    ~capture() {
        cordma::set_log_sink(nullptr);
        cordma::set_log_level(log_level::warning);
    }

    std::vector<captured_line> lines() const {
        std::lock_guard lock(mutex_);
        return lines_;
    }
    std::vector<std::string> texts() const {
        std::vector<std::string> out;
        for (const auto& l : lines())
            out.push_back(l.text);
        return out;
    }

private:
    mutable std::mutex mutex_;
    std::vector<captured_line> lines_;
};

/// This test program's own path, for running one of its hidden cases in a
/// child process with another environment.
std::string self_path() {
    char path[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
    REQUIRE(n > 0);
    return std::string(path, static_cast<std::size_t>(n));
}

/// Runs the hidden case "[.log_child]" of this program with CORDMA_LOG set
/// to `value` (or unset, for nullptr), and returns its output.
std::string run_child(const char* value) {
    std::vector<std::string> args = {"env"};
    if (value)
        args.push_back(std::string("CORDMA_LOG=") + value);
    else
        args.push_back("--unset=CORDMA_LOG");
    args.insert(args.end(), {self_path(), "[.log_child]"});
    cordma::test::child_process child(args, std::chrono::seconds(60));
    cordma::test::process_result result = child.finish();
    INFO(result.describe());
    REQUIRE(result.exited_ok());
    return result.output;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Points this process's stderr (fd 2) at a temporary file until destroyed,
/// so that a test can read what the default sink wrote.
class stderr_capture {
public:
    stderr_capture() : file_(std::tmpfile()) {
        REQUIRE(file_ != nullptr);
        std::fflush(stderr);
        saved_ = ::dup(STDERR_FILENO);
        REQUIRE(saved_ >= 0);
        REQUIRE(::dup2(::fileno(file_), STDERR_FILENO) >= 0);
    }
    stderr_capture(const stderr_capture&) = delete;
    stderr_capture& operator=(const stderr_capture&) = delete;
    ~stderr_capture() {
        restore();
        std::fclose(file_);
    }

    /// What was written so far; stderr is the real one again from here on.
    std::string text() {
        restore();
        std::string out;
        std::rewind(file_);
        char buffer[4096];
        std::size_t n;
        while ((n = std::fread(buffer, 1, sizeof buffer, file_)) > 0)
            out.append(buffer, n);
        return out;
    }

private:
    void restore() {
        if (saved_ < 0)
            return;
        std::fflush(stderr);
        ::dup2(saved_, STDERR_FILENO);
        ::close(saved_);
        saved_ = -1;
    }

    std::FILE* file_;
    int saved_ = -1;
};

}  // namespace

TEST_CASE("the sink receives the lines at and above the level, with their level and text", "[log]") {
    capture sink;
    SECTION("at the default level, warning") {
        cordma::set_log_level(log_level::warning);
        cordma::log(log_level::debug, "d");
        cordma::log(log_level::info, "i");
        cordma::log(log_level::warning, "w");
        cordma::log(log_level::error, "e");
        auto lines = sink.lines();
        REQUIRE(lines.size() == 2);
        CHECK(lines[0].level == log_level::warning);
        CHECK(lines[0].text == "w");
        CHECK(lines[1].level == log_level::error);
        CHECK(lines[1].text == "e");
    }
    SECTION("at debug, everything") {
        cordma::set_log_level(log_level::debug);
        CHECK(cordma::current_log_level() == log_level::debug);
        for (log_level l : {log_level::debug, log_level::info, log_level::warning, log_level::error})
            cordma::log(l, std::string("a line at ") + std::string(cordma::to_string(l)));
        CHECK(sink.texts() == std::vector<std::string>{"a line at debug", "a line at info", "a line at warning",
                                                        "a line at error"});
    }
    SECTION("at error, errors only") {
        cordma::set_log_level(log_level::error);
        cordma::log(log_level::warning, "w");
        cordma::log(log_level::error, "e");
        CHECK(sink.texts() == std::vector<std::string>{"e"});
    }
    SECTION("off silences everything; a line at off is never written") {
        cordma::set_log_level(log_level::off);
        for (log_level l : {log_level::debug, log_level::info, log_level::warning, log_level::error, log_level::off})
            cordma::log(l, "anything");
        CHECK(sink.lines().empty());
        cordma::set_log_level(log_level::debug);
        cordma::log(log_level::off, "not a level of a line");
        CHECK(sink.lines().empty());
    }
    SECTION("a line keeps its bytes exactly, long or with a NUL inside") {
        cordma::set_log_level(log_level::warning);
        std::string long_line(10'000, 'x');
        long_line += "end";
        cordma::log(log_level::warning, long_line);
        cordma::log(log_level::warning, std::string_view("a\0b", 3));
        auto texts = sink.texts();
        REQUIRE(texts.size() == 2);
        CHECK(texts[0] == long_line);
        CHECK(texts[1] == std::string("a\0b", 3));
    }
}

TEST_CASE("the level names are CORDMA_LOG's", "[log]") {
    CHECK(cordma::to_string(log_level::debug) == "debug");
    CHECK(cordma::to_string(log_level::info) == "info");
    CHECK(cordma::to_string(log_level::warning) == "warning");
    CHECK(cordma::to_string(log_level::error) == "error");
    CHECK(cordma::to_string(log_level::off) == "off");
}

TEST_CASE("swapping the sink while 4 threads log loses no line, and a replaced sink is never called again",
          "[log][threads]") {
    // Each swap installs a fresh sink with its own counters. Once
    // set_log_sink returns, the sink it replaced must be idle and stay so:
    // its count then is its final count.
    struct counters {
        std::atomic<int> running{0};
        std::atomic<long> calls{0};
        std::atomic<bool> overlapped_after_retired{false};
        std::atomic<bool> retired{false};
    };
    auto make_sink = [](std::shared_ptr<counters> c) {
        return [c](log_level, std::string_view line) {
            c->running.fetch_add(1);
            if (c->retired.load())
                c->overlapped_after_retired.store(true);
            c->calls.fetch_add(line == "line" ? 1 : 0);
            c->running.fetch_sub(1);
        };
    };
    cordma::set_log_level(log_level::warning);
    std::vector<std::shared_ptr<counters>> sinks{std::make_shared<counters>()};
    cordma::set_log_sink(make_sink(sinks.back()));

    constexpr int threads = 4, lines_each = 20'000, swaps = 300;
    std::atomic<int> started{0};
    std::vector<std::thread> loggers;
    for (int t = 0; t < threads; ++t)
        loggers.emplace_back([&] {
            started.fetch_add(1);
            for (int i = 0; i < lines_each; ++i)
                cordma::log(log_level::warning, "line");
        });
    // Swap while they log (they may finish first on a slow machine: the
    // checks hold either way, the overlap only makes them worth more).
    while (started.load() < threads)
        std::this_thread::yield();
    std::vector<long> calls_when_retired;
    bool idle_when_retired = true;
    for (int s = 0; s < swaps; ++s) {
        sinks.push_back(std::make_shared<counters>());
        cordma::set_log_sink(make_sink(sinks.back()));
        counters& old = *sinks[sinks.size() - 2];
        idle_when_retired = idle_when_retired && old.running.load() == 0;
        old.retired.store(true);
        calls_when_retired.push_back(old.calls.load());
    }
    for (auto& t : loggers)
        t.join();
    cordma::set_log_sink(nullptr);

    CHECK(idle_when_retired);
    long total = 0;
    for (std::size_t i = 0; i < sinks.size(); ++i) {
        total += sinks[i]->calls.load();
        CHECK_FALSE(sinks[i]->overlapped_after_retired.load());
        if (i + 1 < sinks.size())
            CHECK(sinks[i]->calls.load() == calls_when_retired[i]);
    }
    CHECK(total == long{threads} * lines_each);
}

TEST_CASE("a sink may call into cordma: its own lines go to stderr, and it may replace itself", "[log]") {
    std::atomic<int> calls{0};
    SECTION("a line logged inside the sink is not fed back into it, but written to stderr") {
        stderr_capture err;
        cordma::set_log_sink([&](log_level, std::string_view line) {
            ++calls;
            cordma::log(log_level::error, "logged from inside the sink about: " + std::string(line));
        });
        cordma::log(log_level::warning, "outer");
        cordma::set_log_sink(nullptr);
        CHECK(calls == 1);
        CHECK(err.text() == "logged from inside the sink about: outer\n");
    }
    SECTION("a sink that replaces itself does not wait for itself") {
        std::vector<std::string> seen;
        cordma::set_log_sink([&](log_level, std::string_view line) {
            seen.emplace_back(line);
            cordma::set_log_sink([&](log_level, std::string_view l) { seen.push_back("second: " + std::string(l)); });
        });
        cordma::log(log_level::warning, "one");
        cordma::log(log_level::warning, "two");
        cordma::set_log_sink(nullptr);
        CHECK(seen == std::vector<std::string>{"one", "second: two"});
    }
    SECTION("a sink that throws loses no line: it goes to stderr with the exception") {
        stderr_capture err;
        cordma::set_log_sink([&](log_level, std::string_view) {
            ++calls;
            throw std::runtime_error("the sink's disk is full");
        });
        cordma::log(log_level::warning, "a line whose sink throws");
        cordma::log(log_level::warning, "the next one");
        cordma::set_log_sink(nullptr);
        CHECK(calls == 2);
        CHECK(err.text() ==
              "a line whose sink throws\ncordma: the log sink threw: the sink's disk is full\n"
              "the next one\ncordma: the log sink threw: the sink's disk is full\n");
    }
    cordma::set_log_sink(nullptr);
}

TEST_CASE("the default sink writes each line to stderr, with a newline", "[log]") {
    cordma::set_log_sink(nullptr);
    cordma::set_log_level(log_level::warning);
    stderr_capture err;
    cordma::log(log_level::info, "not at the default level");
    cordma::log(log_level::warning, "cordma: a warning");
    cordma::log(log_level::error, "cordma: an error");
    CHECK(err.text() == "cordma: a warning\ncordma: an error\n");
}

TEST_CASE("the C API sets the same sink and level", "[log][c_api]") {
    struct seen_lines {
        std::vector<std::pair<cordma_log_level, std::string>> lines;
    } seen;
    auto sink = [](cordma_log_level level, const char* line, void* user) {
        static_cast<seen_lines*>(user)->lines.emplace_back(level, line);
    };
    REQUIRE(cordma_set_log_sink(sink, &seen) == 0);
    REQUIRE(cordma_set_log_level(CORDMA_LOG_INFO) == 0);
    cordma::log(log_level::debug, "below");
    cordma::log(log_level::info, "at info");
    cordma::log(log_level::error, "at error");
    CHECK(cordma_set_log_level(static_cast<cordma_log_level>(7)) == -1);
    CHECK(cordma_last_errno() == EINVAL);
    CHECK(std::string(cordma_last_error()).find("cordma_set_log_level") != std::string::npos);
    CHECK(cordma::current_log_level() == log_level::info);  // the bad call changed nothing
    REQUIRE(cordma_set_log_sink(nullptr, nullptr) == 0);
    cordma::set_log_level(log_level::warning);
    REQUIRE(seen.lines.size() == 2);
    CHECK(seen.lines[0].first == CORDMA_LOG_INFO);
    CHECK(seen.lines[0].second == "at info");
    CHECK(seen.lines[1].first == CORDMA_LOG_ERROR);
    CHECK(seen.lines[1].second == "at error");
}

// Run only by the case below, in a child process with CORDMA_LOG set to
// each value: one line at each level on the default sink (stderr).
TEST_CASE("child: one line at each level, on the default sink", "[.log_child]") {
    std::printf("level: %s\n", std::string(cordma::to_string(cordma::current_log_level())).c_str());
    std::fflush(stdout);
    for (log_level l : {log_level::debug, log_level::info, log_level::warning, log_level::error})
        cordma::log(l, "child line at " + std::string(cordma::to_string(l)));
}

TEST_CASE("by default lines go to stderr at warning and above; CORDMA_LOG sets the level", "[log]") {
    SECTION("unset: warning and error, one line each, on stderr") {
        std::string out = run_child(nullptr);
        CHECK(contains(out, "level: warning\n"));
        CHECK_FALSE(contains(out, "child line at debug"));
        CHECK_FALSE(contains(out, "child line at info"));
        CHECK(contains(out, "child line at warning\n"));
        CHECK(contains(out, "child line at error\n"));
    }
    SECTION("CORDMA_LOG=debug: every line") {
        std::string out = run_child("debug");
        CHECK(contains(out, "level: debug\n"));
        CHECK(contains(out, "child line at debug\n"));
        CHECK(contains(out, "child line at info\n"));
        CHECK(contains(out, "child line at error\n"));
    }
    SECTION("CORDMA_LOG=ERROR (any case): errors only") {
        std::string out = run_child("ERROR");
        CHECK(contains(out, "level: error\n"));
        CHECK_FALSE(contains(out, "child line at warning"));
        CHECK(contains(out, "child line at error\n"));
    }
    SECTION("CORDMA_LOG=off: nothing") {
        std::string out = run_child("off");
        CHECK(contains(out, "level: off\n"));
        CHECK_FALSE(contains(out, "child line"));
    }
    SECTION("CORDMA_LOG=loud: said once, and warning") {
        std::string out = run_child("loud");
        CHECK(contains(out, "cordma: CORDMA_LOG=loud is not a log level (debug, info, warning, error or off); "
                            "logging at warning\n"));
        CHECK(contains(out, "level: warning\n"));
        CHECK(contains(out, "child line at warning\n"));
        CHECK_FALSE(contains(out, "child line at info"));
    }
}
