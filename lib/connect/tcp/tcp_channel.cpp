#include "connect/tcp/tcp_channel.hpp"

#include <exception>

#include <asio/buffer.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <asio/post.hpp>

#include "engine/connection_state.hpp"
#include "engine/event_listener_owned.hpp"

namespace cordma::detail {

std::shared_ptr<tcp_channel> tcp_channel::make(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io,
                                               std::string peer) {
    auto el = rt->event_listener;
    return owned_by_event_listener_thread(std::move(el),
                                    new tcp_channel(std::move(rt), std::move(io), std::move(peer)));
}

tcp_channel::tcp_channel(std::shared_ptr<runtime> rt, std::shared_ptr<tcp_io> io, std::string peer)
    : rt_(std::move(rt)), service_(&tcp_service::of(*rt_)), io_(std::move(io)), peer_(std::move(peer)) {}

tcp_channel::~tcp_channel() {
    try {
        asio::post(service_->context(), [io = std::move(io_)] { io->close(); });
    } catch (const std::exception&) {
        // Out of memory: the socket closes when its last handler lets go.
    }
}

task<void> tcp_channel::close() {
    if (closing_)
        co_return;
    closing_ = true;
    if (rejoin_)
        rejoin_->stop();
    co_await on_io(*service_, *rt_->event_listener, io_, [](const std::shared_ptr<tcp_io>& io, io_done done) {
        io->close();
        done({});
    });
}

void tcp_channel::enable_rails(connection_settings settings, bool drives) {
    rejoin_ = std::make_shared<rail_rejoin>(
        rt_, std::move(settings), drives,
        // Io-side objects are held only by io handlers (tcp_io.hpp): the
        // socket is reached here by a weak reference, locked on the io thread.
        [service = service_, weak = std::weak_ptr<tcp_io>(io_)](const std::array<std::uint8_t, rail_message_size>& bytes) {
            asio::post(service->context(), [weak, bytes] {
                auto io = weak.lock();
                if (!io)
                    return;
                io->outbox.push_back(bytes);
                if (!io->writing)
                    write_next(std::move(io));
            });
        });
}

void tcp_channel::rail_down(std::uint8_t rail, std::uint32_t generation) noexcept {
    if (rejoin_ && !closing_)
        rejoin_->rail_down(rail, generation);
}

void tcp_channel::write_next(std::shared_ptr<tcp_io> io) {
    if (io->outbox.empty()) {
        io->writing = false;
        return;
    }
    io->writing = true;
    auto* raw = io.get();
    asio::async_write(raw->socket, asio::buffer(raw->outbox.front()),
                      [io = std::move(io)](const asio::error_code& ec, std::size_t) {
                          io->outbox.pop_front();
                          if (ec) {
                              // The watch sees the socket fail and ends the connection.
                              io->outbox.clear();
                              io->writing = false;
                              return;
                          }
                          write_next(io);
                      });
}

void tcp_channel::attach(std::weak_ptr<connection_state> state) {
    state_ = std::move(state);
    if (rejoin_)
        rejoin_->attach(state_);
    asio::post(service_->context(),
               [io = io_, el = rt_->event_listener.get(), self = weak_from_this()] { watch(io, el, self); });
}

void tcp_channel::watch(std::shared_ptr<tcp_io> io, event_listener* el, std::weak_ptr<tcp_channel> self) {
    auto* raw = io.get();
    asio::async_read(raw->socket, asio::buffer(raw->inbox), [io = std::move(io), el, self](
                                                                const asio::error_code& ec, std::size_t) {
        if (!ec) {
            el->post([self, bytes = io->inbox] {
                if (auto channel = self.lock())
                    channel->on_message(bytes);
            });
            watch(io, el, self);
            return;
        }
        el->post([self] {
            if (auto channel = self.lock())
                channel->peer_gone();
        });
    });
}

void tcp_channel::on_message(const std::array<std::uint8_t, rail_message_size>& bytes) noexcept {
    if (closing_)
        return;
    if (rejoin_) {
        rejoin_->on_bytes(bytes);
        return;
    }
    // Nothing may follow "ready" on a connection without rails.
    if (auto state = state_.lock())
        state->shut_down("peer " + peer_ + " sent bytes on the TCP exchange socket after it was ready, where a "
                         "connection without rails has nothing to say",
                         disconnect_cause::other);
}

void tcp_channel::peer_gone() noexcept {
    if (closing_)
        return;  // our own close
    closing_ = true;
    if (rejoin_)
        rejoin_->stop();
    if (auto state = state_.lock())
        state->shut_down("peer " + peer_ + " disconnected (TCP exchange socket closed)",
                            disconnect_cause::peer_closed);
    try {
        asio::post(service_->context(), [io = io_] { io->close(); });
    } catch (const std::exception&) {
    }
}

}  // namespace cordma::detail
