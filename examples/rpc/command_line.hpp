#pragma once
// Command-line helpers shared by rpc_server and rpc_client.

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rpc_demo {

/// A bad command line: main prints it with the usage and exits 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// `text` (the value after `flag`) as a number in low..high, or usage_error.
inline std::uint64_t parse_number(std::string_view flag, const char* text, std::uint64_t low, std::uint64_t high) {
    std::uint64_t value = 0;
    std::string_view s = text != nullptr ? text : "";
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < low || value > high)
        throw usage_error(std::string(flag) + " wants a number in " + std::to_string(low) + ".." +
                          std::to_string(high) + ", got '" + std::string(s) + "'");
    return value;
}

}  // namespace rpc_demo
