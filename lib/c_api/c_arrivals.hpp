#pragma once
/// A listening C context's clients between their connection and
/// cordma_accept. The C hello goes client first (link_hello.hpp), so a
/// client's hello must find receives posted on the server however late
/// cordma_accept comes: a background loop takes every connection the
/// listener completes, posts its receives at once, and holds it here (at
/// most `held` at a time; the listener's own backlog holds the rest, and
/// refuses past it, saying so). cordma_accept takes the oldest.
/// Event listener thread only, but for start().

#include <cstddef>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task.hpp>

#include "engine/waiter_queue.hpp"

namespace cordma::detail::c_api {

/// A client's connection and its receives, already posted.
struct arrival {
    cordma::connection conn;
    receive_queue queue;
};

class arrivals {
public:
    /// Clients held for cordma_accept at once, at most.
    static constexpr std::size_t held = 64;

    /// Starts taking `l`'s connections, posting `count` receives of `size`
    /// bytes from `pool` on each. Any thread; the loop runs on `el` and
    /// ends when `l` closes (the held clients' connections close with it).
    static std::shared_ptr<arrivals> start(std::shared_ptr<cordma::event_listener> el, cordma::listener l,
                                           std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t size);

    /// The oldest client held, waiting for one; nothing once the listener
    /// has closed. Throws operation_cancelled if `token` stops first.
    task<std::optional<arrival>> take(std::stop_token token);
    /// Stops holding clients: those held are closed (with the listener's
    /// close(), the loop then ends).
    void close();

private:
    explicit arrivals(std::shared_ptr<cordma::event_listener> el);
    static task<void> take_clients(std::shared_ptr<arrivals> self, cordma::listener l,
                                   std::shared_ptr<memory_pool> pool, std::size_t count, std::size_t size);

    std::string address_;
    std::shared_ptr<waiter_queue<arrival>> ready_;
    std::shared_ptr<waiter_queue<bool>> room_;  // one token per client that may still be held
};

}  // namespace cordma::detail::c_api
