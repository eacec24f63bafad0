#pragma once
/// What a listener is underneath: an rdma_cm listening id or a TCP acceptor.

#include <stop_token>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/task.hpp>

namespace cordma::detail {

class acceptor {
public:
    virtual ~acceptor() = default;
    virtual task<connection> accept(std::stop_token token) = 0;
    /// Thread-safe.
    virtual void close() = 0;
    virtual const std::string& address() const = 0;
    /// The settings it was made with (its builder's at listen()): what its
    /// accepts use, whatever the builder was changed to afterwards.
    virtual const connection_settings& settings() const noexcept = 0;
};

/// How the library makes the public handle.
struct listener_access {
    static listener make(std::shared_ptr<acceptor> impl) { return listener(std::move(impl)); }
    /// What `l` is underneath (null for an empty handle).
    static const std::shared_ptr<acceptor>& impl(const listener& l) noexcept { return l.impl_; }
};

}  // namespace cordma::detail
