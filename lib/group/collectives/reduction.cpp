#include "group/collectives/reduction.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace cordma::detail {

namespace {

template <class T>
void combine_as(reduce_op op, std::byte* acc, const std::byte* in, std::size_t bytes) noexcept {
    std::size_t count = bytes / sizeof(T);
    for (std::size_t i = 0; i < count; ++i) {
        T a, b;
        std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
        std::memcpy(&b, in + i * sizeof(T), sizeof(T));
        T out;
        switch (op) {
        case reduce_op::sum: out = static_cast<T>(a + b); break;
        case reduce_op::min: out = std::min(a, b); break;
        case reduce_op::max: out = std::max(a, b); break;
        default: out = a; break;
        }
        std::memcpy(acc + i * sizeof(T), &out, sizeof(T));
    }
}

}  // namespace

void combine(element_type type, reduce_op op, std::byte* acc, const std::byte* in, std::size_t bytes) noexcept {
    switch (type) {
    case element_type::i8: return combine_as<std::int8_t>(op, acc, in, bytes);
    case element_type::u8: return combine_as<std::uint8_t>(op, acc, in, bytes);
    case element_type::i16: return combine_as<std::int16_t>(op, acc, in, bytes);
    case element_type::u16: return combine_as<std::uint16_t>(op, acc, in, bytes);
    case element_type::i32: return combine_as<std::int32_t>(op, acc, in, bytes);
    case element_type::u32: return combine_as<std::uint32_t>(op, acc, in, bytes);
    case element_type::i64: return combine_as<std::int64_t>(op, acc, in, bytes);
    case element_type::u64: return combine_as<std::uint64_t>(op, acc, in, bytes);
    case element_type::f32: return combine_as<float>(op, acc, in, bytes);
    case element_type::f64: return combine_as<double>(op, acc, in, bytes);
    }
}

}  // namespace cordma::detail
