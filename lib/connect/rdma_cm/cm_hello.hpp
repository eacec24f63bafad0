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
/// writes: reserved bytes zero, as the other formats require. Integers are
/// little-endian, as in every cordma format (wire/byte_codec.hpp).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include <infiniband/verbs.h>

#include "engine/cm_target.hpp"
#include "wire/byte_codec.hpp"

namespace cordma::detail {

/// The private data an rdma_cm event carries.
inline std::span<const std::uint8_t> private_data_of_event(const cm_event_copy& event) noexcept {
    return std::span<const std::uint8_t>(event.private_data.data(), event.private_data_len);
}

struct cm_hello {
    static constexpr std::uint32_t expected_magic = 0x43444d41;  // "CDMA"
    static constexpr std::size_t size = 16;
    enum kind_type : std::uint8_t { data = 1, control = 2 };

    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    std::uint8_t kind = data;
    /// ibv_mtu code 1..5 of the sender's cap; 0 from a sender that names none.
    std::uint8_t mtu = 0;
    std::uint8_t reserved = 0;
    std::uint64_t token = 0;

    /// The bytes of the connect request's private data.
    std::array<std::byte, size> bytes() const {
        std::array<std::byte, size> out{};
        byte_writer w(out);
        w.u32(magic);
        w.u8(version);
        w.u8(kind);
        w.u8(mtu);
        w.u8(reserved);
        w.u64(token);
        return out;
    }

    /// The hello in a connect request's private data, if it carries a valid
    /// one (a client that is not cordma, or has builder::agent(false),
    /// sends none).
    static std::optional<cm_hello> from(std::span<const std::uint8_t> private_data) {
        if (private_data.size() < size)
            return std::nullopt;
        byte_reader r(private_data.first(size));
        cm_hello h;
        h.magic = r.u32();
        h.version = r.u8();
        h.kind = r.u8();
        h.mtu = r.u8();
        h.reserved = r.u8();
        h.token = r.u64();
        // The token is odd (docs/wire-formats.md): the connection manager
        // pads private data with zeros, so a hello cut short after its
        // first bytes would otherwise pass with token 0.
        if (h.magic != expected_magic || h.version != 1 || (h.kind != data && h.kind != control) ||
            h.mtu > IBV_MTU_4096 || h.reserved != 0 || (h.token & 1) == 0)
            return std::nullopt;
        return h;
    }
    static std::optional<cm_hello> from(const cm_event_copy& event) { return from(private_data_of_event(event)); }
};

struct cm_reply {
    static constexpr std::uint32_t expected_magic = 0x43444d52;  // "CDMR"
    static constexpr std::size_t size = 8;
    std::uint32_t magic = expected_magic;
    std::uint8_t version = 1;
    /// ibv_mtu code both sides use.
    std::uint8_t mtu = 0;
    std::uint16_t reserved = 0;

    std::array<std::byte, size> bytes() const {
        std::array<std::byte, size> out{};
        byte_writer w(out);
        w.u32(magic);
        w.u8(version);
        w.u8(mtu);
        w.u16(reserved);
        return out;
    }

    static std::optional<cm_reply> from(std::span<const std::uint8_t> private_data) {
        if (private_data.size() < size)
            return std::nullopt;
        byte_reader r(private_data.first(size));
        cm_reply h;
        h.magic = r.u32();
        h.version = r.u8();
        h.mtu = r.u8();
        h.reserved = r.u16();
        if (h.magic != expected_magic || h.version != 1 || h.mtu < IBV_MTU_256 || h.mtu > IBV_MTU_4096 ||
            h.reserved != 0)
            return std::nullopt;
        return h;
    }
    static std::optional<cm_reply> from(const cm_event_copy& event) { return from(private_data_of_event(event)); }
};

struct cm_refusal {
    static constexpr std::uint32_t expected_magic = 0x43444d4e;  // "CDMN"
    static constexpr std::size_t size = 8;
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

    std::array<std::byte, size> bytes() const {
        std::array<std::byte, size> out{};
        byte_writer w(out);
        w.u32(magic);
        w.u8(version);
        w.u8(reason);
        w.u16(backlog);
        return out;
    }

    static std::optional<cm_refusal> from(std::span<const std::uint8_t> private_data) {
        if (private_data.size() < size)
            return std::nullopt;
        byte_reader r(private_data.first(size));
        cm_refusal h;
        h.magic = r.u32();
        h.version = r.u8();
        h.reason = r.u8();
        h.backlog = r.u16();
        if (h.magic != expected_magic || h.version != 1 ||
            (h.reason != listener_without_agent && h.reason != listener_with_agent && h.reason != backlog_full) ||
            (h.reason == backlog_full) != (h.backlog != 0))
            return std::nullopt;
        return h;
    }
    static std::optional<cm_refusal> from(const cm_event_copy& event) { return from(private_data_of_event(event)); }
};

}  // namespace cordma::detail
