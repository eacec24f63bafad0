#pragma once
/// What carried a connection's set-up and still watches it: an rdma_cm id,
/// or the TCP socket of the endpoint exchange. The connection state owns it;
/// it tells the state when the peer goes away, and knows how to close.

#include <cstdint>
#include <memory>

#include <cordma/task.hpp>

namespace cordma::detail {

class connection_state;

class transport {
public:
    virtual ~transport() = default;
    /// Event listener thread. Disconnects gracefully and returns once the peer
    /// knows (or a deadline passed); the caller then shuts the state down.
    virtual task<void> close() = 0;
    /// Event listener thread. Called once the state exists, so peer-gone events
    /// can reach it.
    virtual void attach(std::weak_ptr<connection_state> state) = 0;
    /// Event listener thread. Rail `rail` (1..; builder::rails) of the
    /// connection failed while in its `generation` (rail_stripes): a
    /// transport that can tells the peer and admits the rail again later.
    virtual void rail_down(std::uint8_t rail, std::uint32_t generation) noexcept {
        (void)rail;
        (void)generation;
    }
};

}  // namespace cordma::detail
