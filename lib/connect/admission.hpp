#pragma once
/// How a listener admits clients, the same on every transport: each
/// client's handshake starts as it arrives, whether or not an accept()
/// waits, at most max_handshakes at once (the others wait their turn,
/// oldest first); the clients held (handshaking, waiting to, connected and
/// not yet accepted) never exceed builder::backlog, and refusals are
/// logged once per full stretch, not once per client of a storm.
/// Event listener thread only.

#include <cstddef>
#include <deque>
#include <string>
#include <utility>

#include "log/logf.hpp"

namespace cordma::detail {

template <class Client>
class admission {
public:
    /// Handshakes under way at once, at most (each holds a QP and a
    /// coroutine frame until its client answers or connect_timeout ends it).
    static constexpr std::size_t max_handshakes = 64;

    /// `then`: what the refused client does next, for the log.
    admission(std::size_t backlog, const char* then) : backlog_(backlog), then_(then) {}

    /// Whether one more client fits beside `ready` connected ones waiting
    /// for accept(). Logs the first refusal of a full stretch (naming the
    /// client by `peer()`, called only then), and the count of refused
    /// clients once there is room again.
    template <class PeerName>
    bool has_room(std::size_t ready, const std::string& listener, PeerName peer) noexcept {
        if (handshakes_ + waiting_.size() + ready >= backlog_) {
            if (refused_++ == 0)
                logf(log_level::warning,
                     "cordma: listener %s: refused a client from %s: its backlog of %zu is full (%zu handshaking, "
                     "%zu waiting to, %zu connected and waiting for accept()); %s. Raise builder::backlog, or "
                     "accept() sooner",
                     listener.c_str(), peer().c_str(), backlog_, handshakes_, waiting_.size(), ready, then_);
            return false;
        }
        if (refused_ > 0) {
            logf(log_level::warning,
                 "cordma: listener %s: its backlog has room again, after refusing %zu client(s) while full",
                 listener.c_str(), refused_);
            refused_ = 0;
        }
        return true;
    }

    /// Runs `start(client)`, which begins its handshake and calls ended()
    /// once it is over, or queues the client while max_handshakes are
    /// under way. A `start` that throws (no memory) drops its client.
    template <class Start>
    void admit(Client client, Start start) noexcept {
        if (handshakes_ >= max_handshakes) {
            waiting_.push_back(std::move(client));
            return;
        }
        ++handshakes_;
        try {
            start(std::move(client));
        } catch (...) {
            ended(start);
        }
    }

    /// A handshake ended: the oldest waiting client's starts, unless closed.
    template <class Start>
    void ended(Start start) noexcept {
        --handshakes_;
        if (!waiting_.empty() && !closed_) {
            Client next = std::move(waiting_.front());
            waiting_.pop_front();
            admit(std::move(next), start);
        }
    }

    /// Forgets the waiting clients `pred` picks (they went away).
    template <class Pred>
    void forget_if(Pred pred) {
        std::erase_if(waiting_, pred);
    }

    /// No more handshakes start; returns the clients still waiting.
    std::deque<Client> close() {
        closed_ = true;
        return std::exchange(waiting_, {});
    }

    std::size_t backlog() const noexcept { return backlog_; }

private:
    std::size_t backlog_;
    const char* then_;
    std::size_t handshakes_ = 0;
    std::deque<Client> waiting_;
    std::size_t refused_ = 0;
    bool closed_ = false;
};

}  // namespace cordma::detail
