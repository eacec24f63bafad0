#pragma once
/// What a module runs between making a connection and telling the peer
/// it may send.

#include <functional>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

/// Runs on the event listener thread once a connecting side's connection
/// exists and before the peer hears that this side is ready: over rdma_cm
/// before rdma_establish sends the RTU (the listener sees ESTABLISHED only
/// after it), over the TCP exchange before the ready byte (the listener
/// assembles only after reading it). A module whose peer sends first (the
/// rpc server's credits) posts its receives here, so the peer's first
/// frame never meets a receiver-not-ready NAK. If it throws, the connect
/// fails with that exception, and the peer is refused (rdma_cm) or its
/// socket closed (TCP). Plain connections only (builder::agent(false)).
using ready_hook = std::function<void(const connection&)>;

/// builder::connect's inside, for modules: the same connect, with `hook`
/// (may be empty) run as above.
struct builder_access {
    static task<connection> connect(builder& b, std::string address, ready_hook hook);
};

}  // namespace cordma::detail
