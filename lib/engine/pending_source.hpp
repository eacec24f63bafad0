#pragma once
/// A module's part of its event listener's stuck reports
/// (connection_registry::add_source), for as long as this lives: a member
/// of the module's state, declared last so that it leaves the reports
/// before anything it reads is destroyed (a report collects under the
/// registry's lock, which removal takes).

#include <memory>
#include <vector>

#include <cordma/event_listener.hpp>
#include <cordma/stuck_report.hpp>

#include "engine/connection_registry.hpp"
#include "engine/event_listener_access.hpp"

namespace cordma::detail {

class pending_source_registration {
public:
    /// `collect(self, now_ms, out)` runs on `listener`'s thread.
    pending_source_registration(std::shared_ptr<cordma::event_listener> listener,
                                void (*collect)(const void*, std::uint64_t, std::vector<pending_operation>&),
                                const void* self)
        : listener_(std::move(listener)), self_(self) {
        event_listener_access::connections(*listener_).add_source({collect, self});
    }
    ~pending_source_registration() { event_listener_access::connections(*listener_).remove_source(self_); }
    pending_source_registration(const pending_source_registration&) = delete;
    pending_source_registration& operator=(const pending_source_registration&) = delete;

private:
    std::shared_ptr<cordma::event_listener> listener_;
    const void* self_;
};

/// Milliseconds from `since_ms` to `now_ms` (0 if the clock read `since`
/// later, which a coarse clock may).
inline std::chrono::milliseconds age_of(std::uint64_t now_ms, std::uint64_t since_ms) noexcept {
    return std::chrono::milliseconds(now_ms > since_ms ? now_ms - since_ms : 0);
}

}  // namespace cordma::detail
