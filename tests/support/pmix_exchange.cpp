// Run by the group_pmix test under `mpirun -np N`: a plain (non-MPI)
// program that must find PMIx through group_options::from_environment and
// exchange a fake endpoint per rank through it. Exits 0 when every rank
// got exactly what every rank published, 1 with a message otherwise.

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <cordma/group.hpp>

#include "group/bootstrap/group_bootstrap.hpp"

namespace {

std::string fake_endpoint(int rank) { return "10.0.0." + std::to_string(rank) + ":" + std::to_string(7000 + rank); }

}  // namespace

int main() {
    try {
        cordma::group_options options = cordma::group_options::from_environment();
        std::string described = options.describe();
        if (options.bootstrap == nullptr || described.find("PMIx") == std::string::npos) {
            std::fprintf(stderr, "pmix_exchange: from_environment did not pick PMIx under mpirun: %s\n",
                         described.c_str());
            return 1;
        }
        int rank = options.bootstrap->rank();
        int size = options.bootstrap->size();
        if (rank != options.rank || size < 1 || rank < 0 || rank >= size) {
            std::fprintf(stderr, "pmix_exchange: %s: rank %d (options say %d) of %d is inconsistent\n",
                         described.c_str(), rank, options.rank, size);
            return 1;
        }
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        std::vector<std::string> got = options.bootstrap->exchange(fake_endpoint(rank), deadline);
        bool ok = got.size() == static_cast<std::size_t>(size);
        for (int r = 0; ok && r < size; ++r)
            ok = got[r] == fake_endpoint(r);
        if (!ok) {
            std::string list;
            for (auto& e : got)
                list += " " + e;
            std::fprintf(stderr, "pmix_exchange: %s: got [%s ], expected 10.0.0.r:700r for r = 0..%d\n",
                         described.c_str(), list.c_str(), size - 1);
            return 1;
        }
        std::printf("pmix_exchange: %s: all %d endpoints as published\n", described.c_str(), size);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pmix_exchange: %s\n", e.what());
        return 1;
    }
}
