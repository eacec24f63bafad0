#pragma once
/// The private data of cordma's rdma_cm handshakes (docs/wire-formats.md).
///
/// cm_hello, in the connect request: which of a connection's two queue pairs
/// this is (the user's data QP, or the agent's control QP), the token that
/// pairs them on the accepting side, and the sender's path MTU cap.
/// cm_reply, in the accept: the MTU both sides then use (the smaller cap).
/// cm_refusal, in a reject: why a cordma listener refused a client whose
/// builder::agent does not match its own, so that a cordma client fails at
/// once with that reason instead of retrying as if nothing listened; or
/// that its backlog is full, which the client retries until its deadline.
/// Connections without an agent (builder::agent(false)) send none of these:
/// the user's private data instead. Each `from` accepts only what cordma
/// writes: reserved bytes zero, as the other formats require.

#include <cstdint>
#include <cstring>
#include <optional>

#include <infiniband/verbs.h>

#include "engine/cm_target.hpp"

namespace cordma::detail {

struct cm_hello {
    static constexpr std::uint32_t expected_magic = 0x43444d41;  // "CDMA"
    enum kind_type : std::uint8_t { data = 1, control = 2 };

    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    std::uint8_t kind = data;
    /// ibv_mtu code 1..5 of the sender's cap; 0 from a sender that names none.
    std::uint8_t mtu = 0;
    std::uint8_t reserved = 0;
    std::uint64_t token = 0;

    /// The hello in a connect request, if it carries a valid one (a client
    /// that is not cordma, or has builder::agent(false), sends none).
    static std::optional<cm_hello> from(const cm_event_copy& event) {
        cm_hello h;
        if (event.private_data_len < sizeof h)
            return std::nullopt;
        std::memcpy(&h, event.private_data.data(), sizeof h);
        // The token is odd (docs/wire-formats.md): the connection manager
        // pads private data with zeros, so a hello cut short after its
        // first bytes would otherwise pass with token 0.
        if (h.magic != expected_magic || h.version != 1 || (h.kind != data && h.kind != control) ||
            h.mtu > IBV_MTU_4096 || h.reserved != 0 || (h.token & 1) == 0)
            return std::nullopt;
        return h;
    }
};
static_assert(sizeof(cm_hello) == 16);

struct cm_reply {
    static constexpr std::uint32_t expected_magic = 0x43444d52;  // "CDMR"
    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    /// ibv_mtu code both sides use.
    std::uint8_t mtu = 0;
    std::uint16_t reserved = 0;

    static std::optional<cm_reply> from(const cm_event_copy& event) {
        cm_reply r;
        if (event.private_data_len < sizeof r)
            return std::nullopt;
        std::memcpy(&r, event.private_data.data(), sizeof r);
        if (r.magic != expected_magic || r.version != 1 || r.mtu < IBV_MTU_256 || r.mtu > IBV_MTU_4096 ||
            r.reserved != 0)
            return std::nullopt;
        return r;
    }
};
static_assert(sizeof(cm_reply) == 8);

struct cm_refusal {
    static constexpr std::uint32_t expected_magic = 0x43444d4e;  // "CDMN"
    enum reason_type : std::uint8_t {
        /// The listener has builder::agent(false); the client sent a hello.
        listener_without_agent = 1,
        /// The listener has the agent; the client sent no hello.
        listener_with_agent = 2,
        /// The listener's backlog (builder::backlog) is full: clients
        /// connecting or waiting for accept() (a client retries it).
        backlog_full = 3,
    };
    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    std::uint8_t reason = 0;
    /// With backlog_full: the listener's backlog (at least 1; 65535 for any
    /// larger). Zero with the other reasons.
    std::uint16_t backlog = 0;

    static std::optional<cm_refusal> from(const cm_event_copy& event) {
        cm_refusal r;
        if (event.private_data_len < sizeof r)
            return std::nullopt;
        std::memcpy(&r, event.private_data.data(), sizeof r);
        if (r.magic != expected_magic || r.version != 1 ||
            (r.reason != listener_without_agent && r.reason != listener_with_agent && r.reason != backlog_full) ||
            (r.reason == backlog_full) != (r.backlog != 0))
            return std::nullopt;
        return r;
    }
};
static_assert(sizeof(cm_refusal) == 8);

}  // namespace cordma::detail
