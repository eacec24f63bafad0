#include "connect/tcp/tcp_acceptor.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <system_error>

#include <asio/error.hpp>
#include <asio/post.hpp>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "connect/backlog_refusal.hpp"
#include "connect/connect.hpp"
#include "connect/qp_settings.hpp"
#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/tcp_channel.hpp"
#include "connect/tcp/tcp_handshake.hpp"
#include "connect/tcp/tcp_io.hpp"
#include "engine/event_listener_owned.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

using asio::ip::tcp;

accepted_client::~accepted_client() {
    if (fd >= 0)
        ::close(fd);
}

void accept_io::close() noexcept {
    asio::error_code ignored;
    acceptor.close(ignored);
    try {
        retry.cancel();
    } catch (const std::exception&) {
    }
}

std::shared_ptr<tcp_acceptor> tcp_acceptor::make(std::shared_ptr<runtime> rt, connection_settings settings,
                                                 const socket_address& where) {
    auto el = rt->event_listener;
    std::shared_ptr<tcp_acceptor> self =
        owned_by_event_listener_thread(std::move(el), new tcp_acceptor(std::move(rt), std::move(settings), where));
    asio::post(self->service_->context(),
               [io = self->io_, el = self->rt_->event_listener.get(), owner = self->weak_from_this()] {
                   accept_next(io, el, owner);
               });
    return self;
}

tcp_acceptor::~tcp_acceptor() { shut(); }

task<connection> tcp_acceptor::accept(std::stop_token token) {
    // Keeps us alive across the suspensions.
    std::shared_ptr<tcp_acceptor> self = shared_from_this();
    // Only to get onto the event listener (see cm_acceptor::accept).
    if (!rt_->event_listener->running_in_this_thread())
        co_await rt_->event_listener->schedule();
    std::optional<std::shared_ptr<accepted_client>> client = co_await clients_->pop(token, "accept", address_);
    if (!client)
        throw disconnected_error("accept", address_, "the listener is closed");
    co_return std::move((*client)->accepted);
}

// The first parameter keeps the acceptor alive until the handshake ends.
task<void> tcp_acceptor::handshake_and_queue(std::shared_ptr<tcp_acceptor>, std::shared_ptr<accepted_client> client) {
    std::string peer = client->peer;
    std::string failure;
    try {
        auto done = std::make_shared<accepted_client>();
        done->peer = peer;
        done->accepted = co_await handshake(std::move(client));
        // Empty: the listener closed while this client was answering, and
        // the handshake made nothing more for it.
        if (!done->accepted) {
            handshake_ended();
            co_return;
        }
        if (auto refused = clients_->push(std::move(done)))
            (*refused)->accepted.shut_down();  // the listener closed meanwhile
    } catch (const std::exception& e) {
        failure = e.what();
    }
    // The client gave up, timed out, is not a cordma peer or could
    // not agree on the path: drop it.
    if (!failure.empty())
        detail::logf(log_level::warning, "cordma: listener %s: dropped a client from %s: %s", address_.c_str(),
                     peer.c_str(), failure.c_str());
    handshake_ended();
}

void tcp_acceptor::admit(std::shared_ptr<accepted_client> client) noexcept {
    if (handshakes_ >= max_handshakes) {
        waiting_.push_back(std::move(client));
        return;
    }
    ++handshakes_;
    // Each client's handshake runs on its own: one that stalls (half an
    // endpoint message, then silence) holds up nobody else for its
    // connect_timeout.
    try {
        spawn_detached(handshake_and_queue(shared_from_this(), std::move(client)), [](std::exception_ptr) {});
    } catch (...) {
        handshake_ended();  // no memory: the client's socket closed with it
    }
}

void tcp_acceptor::handshake_ended() noexcept {
    --handshakes_;
    if (!waiting_.empty() && !clients_->closed()) {
        auto next = std::move(waiting_.front());
        waiting_.pop_front();
        admit(std::move(next));
    }
}

void tcp_acceptor::close() {
    auto self = shared_from_this();
    rt_->event_listener->post([self] { self->shut(); });
}

tcp_acceptor::tcp_acceptor(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where)
    : rt_(std::move(rt)), settings_(std::move(settings)), service_(&tcp_service::of(*rt_)),
      io_(std::make_shared<accept_io>(service_->context())) {
    std::string wanted = where.to_string();
    tcp::endpoint endpoint = to_endpoint(where);
    asio::error_code ec;
    auto fail = [&](const char* call) {
        throw std::system_error(ec, std::string(call) + "(" + wanted + ") for the TCP endpoint exchange");
    };
    if (io_->acceptor.open(endpoint.protocol(), ec); ec)
        fail("socket");
    if (io_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec); ec)
        fail("setsockopt(SO_REUSEADDR)");
    if (io_->acceptor.bind(endpoint, ec); ec)
        fail("bind");
    // Clients are taken from the kernel's queue as they come and held
    // against settings_.backlog here.
    if (io_->acceptor.listen(1024, ec); ec)
        fail("listen");
    tcp::endpoint bound = io_->acceptor.local_endpoint(ec);
    if (ec)
        fail("getsockname");
    address_ = endpoint_string(bound);
    // The settings are checked against the device now, so a bad one
    // fails listen(), not every accept. (A wildcard address is checked
    // per client, against the address that client reached.)
    if (!bound.address().is_unspecified())
        qp_options(settings_, *rt_->event_listener->device(), where.get(), 0, qp_role::data);
}

void tcp_acceptor::accept_next(std::shared_ptr<accept_io> io, event_listener* el,
                               std::weak_ptr<tcp_acceptor> owner) {
    auto* raw = io.get();
    raw->acceptor.async_accept([io = std::move(io), el, owner](const asio::error_code& ec,
                                                                     tcp::socket socket) mutable {
        // A closed acceptor first: its aborted accept can complete while a
        // program exits, after asio's error categories are destroyed, and
        // comparing `ec` with one of them would touch a dead object
        // (UBSan's invalid vptr in agent_asan at exit).
        if (!io->acceptor.is_open() || ec == asio::error::operation_aborted)
            return;
        if (ec) {
            // Not this client's fault (out of descriptors, ...): try again
            // shortly rather than spin.
            io->retry.expires_after(std::chrono::milliseconds(100));
            auto* again = io.get();
            again->retry.async_wait([io = std::move(io), el, owner](const asio::error_code& wait_ec) {
                if (!wait_ec)
                    accept_next(io, el, owner);
            });
            return;
        }
        auto client = std::make_shared<accepted_client>();
        asio::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        tcp::endpoint local = socket.local_endpoint(ignored);
        client->protocol = local.protocol();
        client->local = address_of(local);
        client->peer = endpoint_string(socket.remote_endpoint(ignored));
        client->fd = socket.release(ignored);
        if (client->fd >= 0)
            el->post([owner, client] {
                if (auto self = owner.lock())
                    self->on_accepted(client);
            });
        accept_next(std::move(io), el, std::move(owner));
    });
}

void tcp_acceptor::on_accepted(std::shared_ptr<accepted_client> client) {
    if (clients_->closed())
        return;  // dropped: the socket closes
    if (held() >= settings_.backlog) {
        if (refused_full_++ == 0)
            detail::logf(log_level::warning,
                         "cordma: listener %s: refused a client from %s: its backlog of %zu is full (%zu "
                         "handshaking, %zu waiting to, %zu connected and waiting for accept()); it retries until "
                         "its connect_timeout. Raise builder::backlog, or accept() sooner",
                         address_.c_str(), client->peer.c_str(), settings_.backlog, handshakes_, waiting_.size(),
                         clients_->ready());
        // Said before the socket closes: the client names the backlog and
        // retries. A fresh socket's buffer takes 36 bytes at once; if it
        // does not, the client sees the close alone.
        endpoint_refusal refusal;
        refusal.backlog = backlog_on_wire(settings_.backlog);
        auto bytes = encode_endpoint_refusal(refusal);
        [[maybe_unused]] auto sent = ::send(client->fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        return;
    }
    if (refused_full_ > 0) {
        detail::logf(log_level::warning,
                     "cordma: listener %s: its backlog has room again, after refusing %zu client(s) while full",
                     address_.c_str(), refused_full_);
        refused_full_ = 0;
    }
    admit(std::move(client));
}

task<connection> tcp_acceptor::handshake(std::shared_ptr<accepted_client> client) {
    auto io = std::make_shared<tcp_io>(service_->context(), client->protocol, client->fd);
    client->fd = -1;  // the socket owns it now
    io->local = client->local;
    auto channel = tcp_channel::make(rt_, io, client->peer);
    start_deadline(*service_, io, settings_.connect_timeout);
    co_return co_await exchange_endpoints(rt_, settings_, std::move(channel), client->peer,
                                          "accept from " + client->peer, false, {},
                                          [this] { return clients_->closed(); });
}

void tcp_acceptor::shut() noexcept {
    if (clients_->closed())
        return;
    // The clients not taken are dropped (they read EOF), connected or not.
    for (auto& client : clients_->close())
        if (client->accepted)
            client->accepted.shut_down();
    waiting_.clear();  // their sockets close
    try {
        asio::post(service_->context(), [io = io_] { io->close(); });
    } catch (const std::exception&) {
    }
}

listener listen_tcp(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where) {
    return listener_access::make(tcp_acceptor::make(std::move(rt), std::move(settings), where));
}

}  // namespace cordma::detail
