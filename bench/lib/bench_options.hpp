#pragma once
// What the module benchmarks' programs share on their command lines
// (bench/rpc/cordma_rpc_bench.cpp, bench/stream/cordma_stream_bench.cpp,
// bench/collectives/cordma_collectives.cpp): options given as NAME VALUE or
// --NAME=VALUE, numbers and seconds checked against their range, the
// polling mode by name, and the error after which a program prints its
// usage. Each program keeps its own options and usage text.

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <cordma/event_listener.hpp>

namespace cordma_bench {

/// A command line the program refuses: main() prints it and the usage.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Walks argv[1..]: for each argument, arg() as given, name() (an option
/// "--name=value" split at its '=') and value() (the inline value, or the
/// next argument, which it consumes). -h and --help print `usage` to
/// stdout and end the program.
class option_reader {
public:
    option_reader(int argc, char** argv, void (*usage)(std::FILE*)) : argc_(argc), argv_(argv), usage_(usage) {}

    /// Moves to the next argument; false once there is none.
    bool next() {
        if (++i_ >= argc_)
            return false;
        arg_ = argv_[i_];
        name_ = arg_;
        inline_value_ = {};
        has_inline_ = false;
        if (auto eq = arg_.find('='); arg_.starts_with("--") && eq != std::string_view::npos) {
            name_ = arg_.substr(0, eq);
            inline_value_ = arg_.substr(eq + 1);
            has_inline_ = true;
        }
        if (name_ == "-h" || name_ == "--help") {
            usage_(stdout);
            std::exit(0);
        }
        return true;
    }

    std::string_view arg() const noexcept { return arg_; }
    std::string_view name() const noexcept { return name_; }

    /// The option's value; throws usage_error if the command line ends first.
    std::string_view value() {
        if (has_inline_) return inline_value_;
        if (i_ + 1 >= argc_) throw usage_error(std::string(name_) + " needs a value");
        return argv_[++i_];
    }

private:
    int argc_;
    char** argv_;
    void (*usage_)(std::FILE*);
    int i_ = 0;
    std::string_view arg_, name_, inline_value_;
    bool has_inline_ = false;
};

/// `s` as a whole number from lo to hi, or usage_error naming the option `what`.
inline long parse_number(std::string_view what, std::string_view s, long lo, long hi) {
    long v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi)
        throw usage_error(std::string(what) + " wants a number from " + std::to_string(lo) + " to " +
                          std::to_string(hi) + ", got '" + std::string(s) + "'");
    return v;
}

/// `s` as seconds (over 0, at most 3600), or usage_error naming the option `what`.
inline double parse_seconds(std::string_view what, std::string_view s) {
    std::string text(s);
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !(v > 0) || v > 3600)
        throw usage_error(std::string(what) + " wants seconds (over 0, at most 3600), got '" + text + "'");
    return v;
}

/// --polling's value by name, or usage_error listing `choices` (each
/// program says them in its own order).
inline cordma::polling_mode parse_polling(std::string_view v, const char* choices) {
    if (v == "event") return cordma::polling_mode::event;
    if (v == "busy") return cordma::polling_mode::busy;
    if (v == "yielding") return cordma::polling_mode::yielding;
    if (v == "adaptive") return cordma::polling_mode::adaptive;
    throw usage_error("--polling: '" + std::string(v) + "' is not " + choices);
}

}  // namespace cordma_bench
