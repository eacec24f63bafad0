#pragma once
/// \file
/// The counters the kernel keeps for one port of an RDMA device: its
/// InfiniBand port counters (packets and data each way, errors) and the
/// driver's own (for rxe: retries, sequence errors, receiver-not-ready
/// NAKs, duplicate requests), read from sysfs on request. What the device
/// saw, beside what cordma did: a retry storm or a lossy link shows here.

#include <cordma/export.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace cordma {

class device_context;

/// One reading of a port's counters. Values are as the kernel gives them
/// (the IB counters `port_xmit_data` and `port_rcv_data` count 4-byte
/// words, as the IB spec says; the rest count events or packets).
struct CORDMA_API device_counters {
    /// The device ("rxe0") they were read from.
    std::string device;
    /// The port they were read from (1-based).
    std::uint8_t port = 0;
    /// `ports/<port>/counters/`: the IB port counters (absent on devices
    /// that have none, such as rxe).
    std::map<std::string, std::uint64_t, std::less<>> port_counters;
    /// `ports/<port>/hw_counters/`: the driver's counters (its `lifespan`
    /// setting left out).
    std::map<std::string, std::uint64_t, std::less<>> hw_counters;

    /// The counter `name` from either set (hw_counters first), or 0 if the
    /// device has none by that name.
    std::uint64_t operator[](std::string_view name) const;
    /// Every counter of this reading less the same in `earlier` (one of the
    /// same port taken before): what happened in between. A counter that
    /// went down (reset, or wrapped) counts from 0.
    device_counters since(const device_counters& earlier) const;
};

/// Reads `port` of `device` now. The kernel refreshes a driver's
/// hw_counters at most every `hw_counters/lifespan` ms (10 by default):
/// a reading sooner than that after another may repeat it. Throws std::system_error naming the sysfs
/// directory when the port has neither counter directory (no such port, or
/// sysfs not mounted); counters that cannot be read or are not numbers
/// are left out.
CORDMA_API device_counters read_device_counters(const device_context& device, std::uint8_t port);

/// The same by device name, from `sysfs_root` (where the kernel lists
/// RDMA devices; another root reads a copy of that tree).
CORDMA_API device_counters read_device_counters(std::string_view device, std::uint8_t port,
                                                const std::filesystem::path& sysfs_root = "/sys/class/infiniband");

}  // namespace cordma
