#pragma once
/// A connect refused because the listener's backlog (builder::backlog) is
/// full, the same on both transports: what the listener puts in its refusal
/// (rdma_cm's cm_refusal, the TCP exchange's endpoint_refusal) and the error
/// the client throws once its retries have run out.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include <cordma/error.hpp>

namespace cordma::detail {

/// builder::backlog as a refusal carries it: 16 bits (the builder allows
/// 1..65535, so nothing is cut).
inline std::uint16_t backlog_on_wire(std::size_t backlog) noexcept {
    return static_cast<std::uint16_t>(std::min<std::size_t>(backlog, 65535));
}

/// The client's error; `who` is "connect to PEER".
inline connect_error backlog_full_error(const std::string& who, std::uint16_t backlog) {
    return connect_error(std::make_error_code(std::errc::connection_refused),
                         who + ": refused: the server's backlog of " + std::to_string(backlog) +
                             " is full (clients connecting or waiting for its accept()); retried until "
                             "builder::connect_timeout: raise builder::backlog on the listener, or "
                             "connect_timeout here");
}

}  // namespace cordma::detail
