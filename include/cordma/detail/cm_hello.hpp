#pragma once
/// The private data cordma puts in its rdma_cm connect requests: which of a
/// connection's two queue pairs this is (the user's data QP, or the agent's
/// control QP), and the token that pairs them on the accepting side.

#include <cstdint>
#include <cstring>
#include <optional>

#include <cordma/queue_pair.hpp>
#include <cordma/detail/cm_target.hpp>

namespace cordma::detail {

struct cm_hello {
    static constexpr std::uint32_t expected_magic = 0x43444d41;  // "CDMA"
    enum kind_type : std::uint8_t { data = 1, control = 2 };

    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    std::uint8_t kind = data;
    std::uint16_t reserved = 0;
    std::uint64_t token = 0;

    /// The hello in a connect request, if it carries a valid one (a client
    /// that is not cordma sends none: it gets a connection without agent).
    static std::optional<cm_hello> from(const cm_event_copy& event) {
        cm_hello h;
        if (event.private_data_len < sizeof h)
            return std::nullopt;
        std::memcpy(&h, event.private_data.data(), sizeof h);
        if (h.magic != expected_magic || h.version != 1 || (h.kind != data && h.kind != control))
            return std::nullopt;
        return h;
    }
};
static_assert(sizeof(cm_hello) == 16);

/// The agent's control QP: a few messages in flight, receives re-posted as
/// soon as handled, so waiting out "receiver not ready" forever is safe.
inline constexpr qp_capacity control_capacity{.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
                                              .max_recv_sge = 1, .max_inline_data = 0};

}  // namespace cordma::detail
