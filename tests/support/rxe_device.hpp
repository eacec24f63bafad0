#pragma once
// Which RDMA device and address the rxe suite runs on. Inside tools/rxe-vm the
// guest exports RXE_VM_DEVICE and RXE_VM_ADDR; on a host with a real device,
// tools/run-tests exports CORDMA_TEST_DEVICE and CORDMA_TEST_ADDR. Without
// either, the suite opens the first active device, and if there is none it
// fails loudly: an RDMA test never passes by skipping.

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/device.hpp>

namespace cordma::test {

inline std::string env_or(const char* first, const char* second, const char* fallback = "") {
    if (const char* v = std::getenv(first); v != nullptr && *v != '\0')
        return v;
    if (const char* v = std::getenv(second); v != nullptr && *v != '\0')
        return v;
    return fallback;
}

/// The device name the suite was told to use ("" = first active).
inline std::string test_device_name() { return env_or("RXE_VM_DEVICE", "CORDMA_TEST_DEVICE"); }

/// The IPv4 address of the test device's netdev (for rdma_cm and TCP tests).
inline std::string test_address() {
    std::string addr = env_or("RXE_VM_ADDR", "CORDMA_TEST_ADDR");
    if (addr.empty())
        throw std::runtime_error(
            "no test address: run the rxe suite through tools/run-tests (it sets RXE_VM_ADDR inside the VM, "
            "or CORDMA_TEST_ADDR on a host with an RDMA device)");
    return addr;
}

/// "ADDR:0": the test address and any free port, for listen().
inline std::string any_port() { return test_address() + ":0"; }

/// A builder on the test device, with default settings otherwise.
inline builder test_builder() {
    builder b;
    b.device(test_device_name());
    return b;
}

/// Opens the test device; throws (failing the test) if there is none.
inline std::shared_ptr<device_context> open_test_device() { return device_context::open(test_device_name()); }

}  // namespace cordma::test
