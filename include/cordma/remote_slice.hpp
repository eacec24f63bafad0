#pragma once
/// \file
/// A region of a peer's memory that this side may access: a plain copyable
/// value (address, length, rkey, and the access the owner granted) that
/// travels over the wire.

#include <cordma/access.hpp>
#include <cordma/export.hpp>
#include <cordma/rails.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cordma {

/// What a peer needs to read, write or use atomics on a region. Owning
/// nothing, it is only as valid as the owner's registration. Trivially
/// copyable: it may be sent as bytes between processes of the same build.
struct CORDMA_API remote_slice {
    /// The region's first byte, as a virtual address in the owner's process.
    std::uint64_t address = 0;
    /// Its length in bytes.
    std::uint64_t length = 0;
    /// The owner's remote key for it, which the peer's device checks.
    std::uint32_t rkey = 0;
    /// What the owner allows on it. A grant from the agent says exactly;
    /// a slice made by hand from an address and rkey defaults to everything
    /// (the owner's registration decides). Operations check it before
    /// posting: a write to a slice without remote_write throws
    /// std::invalid_argument, nothing reaches the wire.
    access_flags access = access_flags::all;
    /// The owner's keys for the same memory on its rails 1.. (builder::
    /// rails), element i for rail i + 1; meaningful for the first
    /// `rails - 1`. A slice made by hand from an address and rkey has one
    /// rail: operations on it use rail 0 only.
    std::array<std::uint32_t, max_rails - 1> rail_rkeys{};
    /// On how many of the owner's rails the memory is registered (1: rail
    /// 0's `rkey` only).
    std::uint8_t rails = 1;

    /// Its length in bytes (the same as `length`).
    std::uint64_t size() const noexcept { return length; }

    /// [offset, offset + length) of this region. Checked here, before anything
    /// is posted: out of range throws std::out_of_range naming the region,
    /// the offset and the length.
    remote_slice slice(std::uint64_t offset, std::uint64_t slice_length) const;
    /// From `offset` to the end.
    remote_slice slice(std::uint64_t offset) const;

    /// Field by field, access included.
    friend bool operator==(const remote_slice&, const remote_slice&) = default;
};

static_assert(std::is_trivially_copyable_v<remote_slice>, "a remote_slice travels between processes as bytes");

/// "remote_slice{address=0x7f.., length=4096, rkey=0x1234}"
CORDMA_API std::string to_string(const remote_slice& region);

}  // namespace cordma
