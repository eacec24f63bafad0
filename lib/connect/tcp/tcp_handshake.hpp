#pragma once
/// Both sides' half of the TCP endpoint exchange (the conversation is in
/// endpoint_message.hpp), over a socket already connected or accepted.
/// Threads and lifetimes: see tcp_io.hpp.

#include <functional>
#include <memory>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/task.hpp>

#include "connect/ready_hook.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

class tcp_channel;

/// Event listener thread, both sides, over a connected socket whose deadline is
/// running: create the QP, send our endpoint and read theirs (`connecting`:
/// the client, which reads the listener's first), connect the QP,
/// then exchange "ready". With the agent, a second pair of endpoints for its
/// control QP; without (builder::agent(false)), the private data each way
/// instead. A listener's refusal (its backlog full) throws handshake_error
/// with connection_refused, naming the backlog. Throws handshake_error for
/// what the peer or the
/// network did wrong. `who` names this side's attempt in errors ("connect to
/// 10.0.0.2:7471", "accept from 10.0.0.3:51234"). A client's `hook`
/// (ready_hook; plain connections) runs on the assembled connection before
/// it says it is ready; the connection watches its socket from then on.
/// A listener's `abandoned` (its listener closed) is asked once the QPs are
/// connected: if it says so, nothing more is made (no agent, no pool
/// memory), the socket closes (the client's connect fails reading EOF
/// where it waits for our ready byte) and the result is an empty
/// connection.
task<connection> exchange_endpoints(std::shared_ptr<runtime> rt, connection_settings settings,
                                    std::shared_ptr<tcp_channel> channel, std::string peer, std::string who,
                                    bool connecting, ready_hook hook = {}, std::function<bool()> abandoned = {});

}  // namespace cordma::detail
