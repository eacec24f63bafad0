#pragma once
/// The transport of a connection set up by the TCP endpoint exchange: the
/// listener-side owner of its exchange socket, which after the handshake
/// watches the socket and turns EOF into a shut-down connection. Threads and
/// lifetimes: see tcp_io.hpp.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <cordma/event_listener.hpp>
#include <cordma/task.hpp>

#include "connect/runtime.hpp"
#include "connect/tcp/rail_rejoin.hpp"
#include "connect/tcp/tcp_io.hpp"
#include "connect/tcp/tcp_service.hpp"
#include "engine/transport.hpp"

namespace cordma::detail {

class connection_state;

/// The owner of one exchange socket (either side): during the handshake the
/// socket; afterwards the connection's transport, turning EOF on the socket
/// into a shut-down connection and, with rails, carrying the messages that
/// admit a failed rail again (rail_rejoin.hpp). Event listener thread;
/// destroyed there.
class tcp_channel final : public transport, public std::enable_shared_from_this<tcp_channel> {
public:
    static std::shared_ptr<tcp_channel> make(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io,
                                             std::string peer);

    ~tcp_channel() override;

    const std::shared_ptr<tcp_io>& io() const noexcept { return io_; }
    tcp_service& service() const noexcept { return *service_; }

    /// Shuts the socket down (the peer reads EOF) and returns once that is
    /// done. Sends nothing else.
    task<void> close() override;

    /// Starts watching the socket: EOF or an error shuts the state down.
    void attach(std::weak_ptr<connection_state> state) override;

    /// Before attach, on a connection with rails (builder::rails): failed
    /// rails are told to the peer and admitted again over this socket;
    /// `drives`: this side connected (it makes the attempts).
    void enable_rails(connection_settings settings, bool drives);
    void rail_down(std::uint8_t rail, std::uint32_t generation) noexcept override;

private:
    tcp_channel(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io, std::string peer);

    /// Io thread. Keeps one read pending for as long as the socket is open.
    /// Without rails nothing is sent after "ready"; with them, rail messages.
    static void watch(std::shared_ptr<tcp_io> io, event_listener* el, std::weak_ptr<tcp_channel> self);
    /// Io thread. Writes the outbox's messages one after another.
    static void write_next(std::shared_ptr<tcp_io> io);

    /// Event listener thread.
    void peer_gone() noexcept;
    /// Event listener thread. A message read after "ready".
    void on_message(const std::array<std::uint8_t, rail_message_size>& bytes) noexcept;

    std::shared_ptr<runtime> rt_;
    tcp_service* service_;
    std::shared_ptr<tcp_io> io_;
    std::string peer_;
    std::weak_ptr<connection_state> state_;
    std::shared_ptr<rail_rejoin> rejoin_;
    bool closing_ = false;
};

}  // namespace cordma::detail
