#pragma once
/// The engine's own hooks into the event listener, for cordma's layers and
/// never for users (so not in the installed header's API, and not
/// exported): batched doorbells per drain pass (the connection state) and
/// the rdma_cm event channel (the rdma_cm transport).

#include <cordma/event_listener.hpp>

namespace cordma::detail {

class event_listener_access {
public:
    /// Event listener thread. True while completions are being handed out
    /// (a drain pass): a work request posted now can wait for the pass to
    /// end and go out in one chain (ring_after_drain).
    static bool in_drain_pass(const event_listener& l) noexcept { return l.in_drain_pass(); }
    /// Event listener thread, during a drain pass: `bell` is rung once the
    /// pass ends (once, however often it is asked); it must stay valid
    /// until rung.
    static void ring_after_drain(event_listener& l, doorbell* bell) noexcept { l.ring_after_drain(bell); }
    /// The rdma_cm event channel the listener serves (made on first use):
    /// ids made on it deliver their events to the cm_target in
    /// id->context, on the event listener thread.
    static rdma_event_channel* cm_channel(event_listener& l) { return l.cm_channel(); }

    using drive_result = event_listener::drive_result;
    /// A thread other than the listener's, about to wait for work of its
    /// own on the listener (a C API call): takes the listener's loop if it
    /// can, calls start(arg) on it, and runs the loop's turns itself until
    /// `done` is set. The result says whether it must still wait (and then
    /// call end_wait): see event_listener::drive_result.
    static drive_result drive(event_listener& l, void (*start)(void*), void* arg, const std::atomic<bool>& done) {
        return l.drive(start, arg, done);
    }
    /// After drive() returned not_taken or handed_back, once the wait ended.
    static void end_wait(event_listener& l) noexcept { l.end_wait(); }
    /// The connections counted for metrics (connection_registry.hpp).
    static connection_registry& connections(event_listener& l) noexcept { return *l.connections_; }
    /// The loop's turn time (coarse, ms): what pending operations are
    /// stamped with. Loop thread.
    static const std::uint64_t* turn_ms(const event_listener& l) noexcept { return &l.turn_ms_; }
    /// The loop's turn time in ticks (lib/core/tick_clock.hpp): where
    /// latencies start and end. Loop thread.
    static const std::uint64_t* turn_tick(const event_listener& l) noexcept { return &l.turn_tick_; }
};

}  // namespace cordma::detail
