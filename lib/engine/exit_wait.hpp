#pragma once
/// Exit and the event listener threads still tearing down: a thread whose
/// last handle went on itself is detached, and exit waits for it (at most
/// 10 s) before the statics its teardown may touch are destroyed.

namespace cordma::detail {

/// Registers that wait with atexit again, now: exit runs atexit functions
/// and static destructors in the reverse order of their registration, so
/// the wait then comes before the destructors of every static made so far.
/// A layer whose teardown touches statics of its own (the TCP exchange:
/// asio's error categories, compared in handlers that run while a listener
/// is torn down) makes them first, then calls this. Cheap, but call it once.
void wait_at_exit_for_statics_made_so_far() noexcept;

}  // namespace cordma::detail
