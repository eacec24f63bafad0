#include <stdexcept>

#include <cordma/detail/connect.hpp>

namespace cordma::detail {

task<connection> connect_tcp(std::shared_ptr<runtime>, connection_settings, socket_address) {
    throw std::logic_error("endpoint_exchange::tcp: not implemented yet");
    co_return connection{};
}

listener listen_tcp(std::shared_ptr<runtime>, connection_settings, const socket_address&) {
    throw std::logic_error("endpoint_exchange::tcp: not implemented yet");
}

}  // namespace cordma::detail
