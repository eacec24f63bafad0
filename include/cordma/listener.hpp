#pragma once
/// \file
/// A listening rdma_cm id (or TCP acceptor): accepts connections from as
/// many clients as arrive.

#include <memory>
#include <stop_token>
#include <string>

#include <cordma/connection.hpp>
#include <cordma/export.hpp>
#include <cordma/task.hpp>

namespace cordma {

namespace detail {
class acceptor;
struct listener_access;
}

/// Accepts connections: made by builder::listen, which binds and starts
/// listening at once (clients may connect from then on; their handshakes
/// wait for an accept). A cheap handle: copies share one listening
/// endpoint, which closes with the last copy or close(). Accepted
/// connections outlive it.
class CORDMA_API listener {
public:
    /// An empty handle: accept() and address() throw std::logic_error.
    listener() = default;

    /// Waits for the next client and completes its handshake. Lazy; resumes
    /// on the event listener thread. Several accepts may wait at once; each
    /// gets its own client. A client that gives up mid-handshake is dropped
    /// and the accept goes on waiting. So is (at once, logged on stderr with
    /// the reason) a client whose builder::agent differs from the one this
    /// listener was made with: a listener with the agent takes cordma
    /// clients with the agent, one with builder::agent(false) takes plain
    /// clients (any librdmacm program, or cordma with agent(false)). Throws disconnected_error once the
    /// listener is closed, operation_cancelled if `token` is stopped.
    task<connection> accept(std::stop_token token = {});

    /// Stops listening: waiting accepts throw, pending requests are
    /// rejected. Thread-safe. The destructor of the last copy does it too.
    void close();

    /// The address it listens on, as "ip:port".
    const std::string& address() const;

private:
    friend struct detail::listener_access;
    explicit listener(std::shared_ptr<detail::acceptor> impl) : impl_(std::move(impl)) {}

    std::shared_ptr<detail::acceptor> impl_;
};

}  // namespace cordma
