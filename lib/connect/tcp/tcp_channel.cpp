#include "connect/tcp/tcp_channel.hpp"

#include <exception>

#include <asio/buffer.hpp>
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
    co_await on_io(*service_, *rt_->event_listener, io_, [](const std::shared_ptr<tcp_io>& io, io_done done) {
        io->close();
        done({});
    });
}

void tcp_channel::attach(std::weak_ptr<connection_state> state) {
    state_ = std::move(state);
    asio::post(service_->context(),
               [io = io_, el = rt_->event_listener.get(), self = weak_from_this()] { watch(io, el, self); });
}

void tcp_channel::watch(std::shared_ptr<tcp_io> io, event_listener* el, std::weak_ptr<tcp_channel> self) {
    auto* raw = io.get();
    raw->socket.async_read_some(asio::buffer(&raw->stray, 1), [io = std::move(io), el, self](
                                                                  const asio::error_code& ec, std::size_t) {
        if (!ec) {
            watch(io, el, self);
            return;
        }
        el->post([self] {
            if (auto channel = self.lock())
                channel->peer_gone();
        });
    });
}

void tcp_channel::peer_gone() noexcept {
    if (closing_)
        return;  // our own close
    closing_ = true;
    if (auto state = state_.lock())
        state->shut_down("peer " + peer_ + " disconnected (TCP exchange socket closed)",
                            disconnect_cause::peer_closed);
    try {
        asio::post(service_->context(), [io = io_] { io->close(); });
    } catch (const std::exception&) {
    }
}

}  // namespace cordma::detail
