#pragma once
/// The transports behind builder::connect and builder::listen.

#include <memory>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>

#include "connect/ready_hook.hpp"
#include "connect/runtime.hpp"

namespace cordma::detail {

/// `hook`: see ready_hook (empty: none).
task<connection> connect_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where,
                                 ready_hook hook = {});
listener listen_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where);

task<connection> connect_tcp(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where,
                             ready_hook hook = {});
listener listen_tcp(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where);

}  // namespace cordma::detail
