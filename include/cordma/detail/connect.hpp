#pragma once
/// The connection handshakes behind builder::connect and listener::accept.

#include <memory>

#include <rdma/rdma_cma.h>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>
#include <cordma/detail/cm_id.hpp>
#include <cordma/detail/runtime.hpp>

namespace cordma::detail {

std::shared_ptr<runtime> make_runtime(const connection_settings& settings);

task<connection> connect_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where);
task<connection> connect_tcp(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where);
listener listen_tcp(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where);

rdma_conn_param connection_parameters(const runtime& rt, const connection_settings& settings);
/// Listener thread: a connection over the cm id's QP, owning the id.
connection make_connection(const std::shared_ptr<runtime>& rt, const connection_settings& settings,
                           const qp_capacity& capacity, std::shared_ptr<cm_id> cm);

}  // namespace cordma::detail
