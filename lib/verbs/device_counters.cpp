#include <cordma/device_counters.hpp>

#include <charconv>
#include <fstream>
#include <system_error>

#include <cordma/device.hpp>

namespace cordma {

namespace {

namespace fs = std::filesystem;

/// Every file in `dir` whose whole content is a decimal number; false if
/// `dir` is not a directory.
bool read_counter_dir(const fs::path& dir, std::map<std::string, std::uint64_t, std::less<>>& out) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return false;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::string name = entry.path().filename().string();
        if (name == "lifespan")  // hw_counters' refresh period, a setting
            continue;
        std::ifstream in(entry.path());
        std::string text;
        if (!in || !std::getline(in, text))
            continue;  // unreadable on this driver
        std::uint64_t value = 0;
        auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (err == std::errc() && end == text.data() + text.size())
            out.emplace(std::move(name), value);
    }
    return true;
}

}  // namespace

std::uint64_t device_counters::operator[](std::string_view name) const {
    if (auto it = hw_counters.find(name); it != hw_counters.end())
        return it->second;
    if (auto it = port_counters.find(name); it != port_counters.end())
        return it->second;
    return 0;
}

device_counters device_counters::since(const device_counters& earlier) const {
    device_counters out = *this;
    auto subtract = [](auto& now, const auto& before) {
        for (auto& [name, value] : now)
            if (auto it = before.find(name); it != before.end() && it->second <= value)
                value -= it->second;
    };
    subtract(out.port_counters, earlier.port_counters);
    subtract(out.hw_counters, earlier.hw_counters);
    return out;
}

device_counters read_device_counters(std::string_view device, std::uint8_t port, const fs::path& sysfs_root) {
    device_counters c;
    c.device = std::string(device);
    c.port = port;
    fs::path dir = sysfs_root / c.device / "ports" / std::to_string(port);
    bool any = read_counter_dir(dir / "counters", c.port_counters);
    any = read_counter_dir(dir / "hw_counters", c.hw_counters) || any;
    if (!any)
        throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory),
                                "read_device_counters(" + c.device + ", port " + std::to_string(port) +
                                    "): neither " + (dir / "counters").string() + " nor " +
                                    (dir / "hw_counters").string() +
                                    " exists (no such device or port, or sysfs is not mounted)");
    return c;
}

device_counters read_device_counters(const device_context& device, std::uint8_t port) {
    return read_device_counters(device.name(), port);
}

}  // namespace cordma
