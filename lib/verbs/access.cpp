#include <cordma/access.hpp>

namespace cordma {

std::string to_string(access_flags a) {
    static constexpr std::pair<access_flags, const char*> names[] = {
        {access_flags::local_write, "local_write"},
        {access_flags::remote_write, "remote_write"},
        {access_flags::remote_read, "remote_read"},
        {access_flags::remote_atomic, "remote_atomic"},
    };
    std::string out;
    int rest = to_verbs(a);
    for (auto [bit, name] : names) {
        if (rest & to_verbs(bit)) {
            out += out.empty() ? "" : "|";
            out += name;
            rest &= ~to_verbs(bit);
        }
    }
    if (rest != 0)
        out += (out.empty() ? "" : "|") + std::string("0x") + [rest] {
            char buf[16];
            snprintf(buf, sizeof buf, "%x", rest);
            return std::string(buf);
        }();
    return out.empty() ? "none" : out;
}

}  // namespace cordma
