#pragma once
// Ranks of a cordma::group as threads of one test process, each with its
// own builder (its own event listener, PD and connections, as separate
// processes would have), on the rxe test device: the fixture the group
// tests share.

#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>

#include "support/rxe_device.hpp"

namespace cordma::test {

/// n endpoints on the test address, on ports no other group of this
/// process uses.
inline std::vector<std::string> host_list(int n) {
    static std::atomic<int> next_port{7700};
    int base = next_port.fetch_add(n);
    std::vector<std::string> hosts;
    for (int r = 0; r < n; ++r)
        hosts.push_back(test_address() + ":" + std::to_string(base + r));
    return hosts;
}

/// A builder on the test device (each rank its own).
inline builder rank_builder() { return test_builder(); }

/// Runs `body(rank)` on n threads at once; returns each rank's failure
/// message ("" for none).
inline std::vector<std::string> run_ranks(int n, const std::function<void(int)>& body) {
    std::vector<std::string> failures(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (const std::exception& e) {
                failures[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads)
        t.join();
    return failures;
}

/// Checks that no rank failed, naming each one that did.
inline void require_none(const std::vector<std::string>& failures) {
    for (std::size_t r = 0; r < failures.size(); ++r) {
        INFO("rank " << r << ": " << failures[r]);
        CHECK(failures[r].empty());
    }
}

}  // namespace cordma::test
