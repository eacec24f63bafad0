#include <cordma/remote_slice.hpp>

#include <cstdio>
#include <stdexcept>

#include "verbs/slice_check.hpp"

namespace cordma {

std::string to_string(const remote_slice& region) {
    char text[96];
    std::snprintf(text, sizeof text, "remote_slice{address=0x%llx, length=%llu, rkey=0x%x",
                  static_cast<unsigned long long>(region.address), static_cast<unsigned long long>(region.length),
                  region.rkey);
    std::string out = text;
    for (std::size_t rail = 1; rail < region.rails && rail < max_rails; ++rail) {
        std::snprintf(text, sizeof text, ", rail %zu rkey=0x%x", rail, region.rail_rkeys[rail - 1]);
        out += text;
    }
    if (region.access != access_flags::all)
        out += ", access=" + to_string(region.access & (access_flags::remote_read | access_flags::remote_write |
                                                        access_flags::remote_atomic));
    return out + "}";
}

remote_slice remote_slice::slice(std::uint64_t offset, std::uint64_t slice_length) const {
    detail::check_slice(length, offset, slice_length, [this] { return to_string(*this); });
    remote_slice part = *this;
    part.address = address + offset;
    part.length = slice_length;
    return part;
}

remote_slice remote_slice::slice(std::uint64_t offset) const {
    detail::check_slice(length, offset, 0, [this] { return to_string(*this); });
    remote_slice part = *this;
    part.address = address + offset;
    part.length = length - offset;
    return part;
}

}  // namespace cordma

namespace cordma::detail {

void throw_slice_out_of_range(const std::string& region, std::uint64_t offset, std::uint64_t length) {
    throw std::out_of_range(region + ".slice(offset=" + std::to_string(offset) + ", length=" +
                            std::to_string(length) + "): out of range; nothing was posted");
}

}  // namespace cordma::detail
