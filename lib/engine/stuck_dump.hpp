#pragma once
/// CORDMA_DUMP_ON=SIGUSR2 (or USR2, or a signal's number): the process's
/// stuck report (stuck_report.hpp) written through the log sink each time
/// the signal arrives, from a thread of the library's own (a signal
/// handler may do almost nothing: it writes one byte to a pipe).

namespace cordma::detail {

/// Installs the handler, the first time it is called with the variable set
/// (event_listener::start). Throws std::invalid_argument naming the
/// variable for a signal it cannot take (an unknown name, SIGKILL,
/// SIGSTOP).
void start_environment_stuck_dump();

}  // namespace cordma::detail
