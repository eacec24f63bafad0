// metrics_endpoint_share.hpp: the builders' endpoints by address, and the
// environment's.
#include "engine/metrics_endpoint_share.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include <unistd.h>

namespace cordma::detail {

namespace {

// CORDMA_METRICS's, never destroyed (an atomic, so the store is kept and
// the leak checker sees the endpoint reachable).
std::atomic<metrics_endpoint*> environment_endpoint{nullptr};

}  // namespace

std::shared_ptr<metrics_endpoint> shared_metrics_endpoint(const std::string& where) {
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<metrics_endpoint>> serving;
    std::lock_guard lock(mutex);
    std::weak_ptr<metrics_endpoint>& slot = serving[where];
    if (auto live = slot.lock())
        return live;
    auto made = std::make_shared<metrics_endpoint>(where);
    slot = made;
    return made;
}

void start_environment_metrics_endpoint() {
    // Once; a failure throws and leaves it to be tried again (call_once).
    static std::once_flag once;
    std::call_once(once, [] {
        const char* where = std::getenv("CORDMA_METRICS");
        if (where == nullptr || *where == '\0')
            return;
        // "%p": this process's id, so the processes of one job (mpirun's
        // ranks) given one value each serve at their own address.
        std::string address = where;
        for (std::size_t at = address.find("%p"); at != std::string::npos; at = address.find("%p", at))
            address.replace(at, 2, std::to_string(getpid()));
        try {
            // Never stopped: it serves until the process ends (its thread
            // waits in poll; exit ends it with the rest).
            environment_endpoint.store(new metrics_endpoint(address));
        } catch (const std::exception& e) {
            throw std::invalid_argument(std::string("CORDMA_METRICS=") + where + ": " + e.what());
        }
    });
}

}  // namespace cordma::detail
