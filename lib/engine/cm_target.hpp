#pragma once
/// How rdma_cm events reach their owner. An rdma_cm_id's context points to a
/// cm_target; the event listener copies each event, acks it at once (so
/// rdma_destroy_id, which waits for acks, can never deadlock against a
/// handler), then calls the target on the event listener thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <rdma/rdma_cma.h>

namespace cordma::detail {

struct cm_event_copy {
    /// The most private data an rdma_cm event carries: an accept's (IB CM
    /// REP, 196 bytes; a connect request carries 56, a reject 148).
    static constexpr std::size_t max_private_data = 196;

    rdma_cm_event_type type{};
    int status = 0;
    rdma_cm_id* id = nullptr;
    rdma_cm_id* listen_id = nullptr;
    std::uint8_t private_data_len = 0;
    std::array<std::uint8_t, max_private_data> private_data{};
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
};

struct cm_target {
    void (*on_event)(cm_target* self, const cm_event_copy& event) noexcept = nullptr;
};

}  // namespace cordma::detail
