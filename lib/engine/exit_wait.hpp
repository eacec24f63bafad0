#pragma once
/// Exit's wait for threads cordma detached while they still tear down.
///
/// A thread that drops the last reference to what owns it (an event
/// listener's, the TCP exchange's io thread) cannot join itself, so it is
/// detached and finishes its teardown alone. A program that returns from
/// main meanwhile would run exit's destructors (error categories, the
/// sanitizers' leak check) under that teardown. So exit waits, for at most
/// 10 s, until every such thread has said it is done.

namespace cordma::detail {

/// Called by a thread as it is detached: exit now waits for it.
void exit_wait_begin() noexcept;
/// Called by that thread once its teardown is over, as its last act.
void exit_wait_end() noexcept;
/// Exit runs its waits and static destructors in the reverse order of
/// their making: this registers the wait once more, so that it runs before
/// the destructors of the statics made until now (a teardown's error
/// categories). Call it once those are made.
void exit_wait_after_statics() noexcept;

}  // namespace cordma::detail
