// connection::peer_private_data (declared in <cordma/connection.hpp>): what
// the peer's handshake left on a plain connection (builder::agent(false)),
// kept by whatever set the connection up (lib/connect/assemble.cpp).
#include <cordma/connection.hpp>

#include "engine/connection_state.hpp"

namespace cordma {

std::span<const std::byte> connection::peer_private_data() const {
    return checked_state("peer_private_data").peer_private_data;
}

}  // namespace cordma
