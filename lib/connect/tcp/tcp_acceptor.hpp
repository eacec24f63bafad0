#pragma once
/// The listening side of the TCP endpoint exchange (listen_tcp): a listening
/// socket whose clients the io thread accepts and hands over, as plain file
/// descriptors, to accept(), which runs the server's half of the handshake.
/// Threads and lifetimes: see tcp_io.hpp.

#include <deque>
#include <memory>
#include <stop_token>
#include <string>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/task.hpp>

#include "connect/acceptor.hpp"
#include "connect/runtime.hpp"
#include "connect/tcp/tcp_service.hpp"
#include "engine/waiter_queue.hpp"

namespace cordma::detail {

/// A client the io thread accepted, on its way to the event listener thread: a
/// plain descriptor, closed unless a handshake takes it. Or, once its
/// handshake has succeeded, the connection (`accepted`) for the next accept().
struct accepted_client {
    int fd = -1;
    asio::ip::tcp protocol = asio::ip::tcp::v4();
    socket_address local{};
    std::string peer;
    connection accepted;

    accepted_client() = default;
    accepted_client(const accepted_client&) = delete;
    accepted_client& operator=(const accepted_client&) = delete;
    ~accepted_client();
};

struct accept_io {
    explicit accept_io(asio::io_context& context) : acceptor(context), retry(context) {}

    /// Io thread.
    void close() noexcept;

    asio::ip::tcp::acceptor acceptor;
    // Back-off after an accept error that is not the client's (EMFILE, ...).
    asio::steady_timer retry;
};

/// A listening TCP socket: each client the io thread accepts starts its
/// handshake at once (at most max_handshakes at a time, the others waiting
/// their turn), and its connection waits here for the next accept();
/// clients held never exceed builder::backlog. Event listener
/// thread; destroyed there.
class tcp_acceptor final : public acceptor, public std::enable_shared_from_this<tcp_acceptor> {
public:
    /// Binds and listens on the calling thread, so a bad or busy address
    /// throws at once.
    static std::shared_ptr<tcp_acceptor> make(std::shared_ptr<runtime> rt, connection_settings settings,
                                              const socket_address& where);

    ~tcp_acceptor() override;

    const std::string& address() const noexcept override { return address_; }
    const connection_settings& settings() const noexcept override { return settings_; }

    task<connection> accept(std::stop_token token) override;

    void close() override;

private:
    tcp_acceptor(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where);

    /// Io thread. One accept pending while the acceptor is open; each client
    /// goes to the event listener thread as a descriptor.
    static void accept_next(std::shared_ptr<accept_io> io, event_listener* el, std::weak_ptr<tcp_acceptor> owner);

    /// Event listener thread: the client's handshake starts now (or once
    /// one of max_handshakes ends), whether or not an accept() waits;
    /// past builder::backlog the client is closed, and logged.
    void on_accepted(std::shared_ptr<accepted_client> client);
    void admit(std::shared_ptr<accepted_client> client) noexcept;
    void handshake_ended() noexcept;
    std::size_t held() const noexcept { return handshakes_ + waiting_.size() + clients_->ready(); }
    static constexpr std::size_t max_handshakes = 64;

    /// Event listener thread: the server's half of the handshake, bounded by
    /// connect_timeout.
    task<connection> handshake(std::shared_ptr<accepted_client> client);
    /// handshake(), then the connection queued for accept() (or the client
    /// dropped, and logged).
    task<void> handshake_and_queue(std::shared_ptr<tcp_acceptor> self, std::shared_ptr<accepted_client> client);

    /// Event listener thread. Closes the listening socket and every client not yet
    /// taken (they read EOF); waiting accepts throw.
    void shut() noexcept;

    std::shared_ptr<runtime> rt_;
    connection_settings settings_;
    tcp_service* service_;
    std::shared_ptr<accept_io> io_;
    std::string address_;
    // Connected clients, for accept().
    std::shared_ptr<waiter_queue<std::shared_ptr<accepted_client>>> clients_ =
        waiter_queue<std::shared_ptr<accepted_client>>::make(rt_->event_listener);
    // Clients that came while max_handshakes were under way, oldest first.
    std::deque<std::shared_ptr<accepted_client>> waiting_;
    std::size_t handshakes_ = 0;
    std::size_t refused_full_ = 0;
};

}  // namespace cordma::detail
