// Rank 0's rendezvous: an acceptor, one coroutine per client, a status tick,
// all on a private io_context run on the calling thread until the list is
// out or the deadline passes. Nothing a client does can block the others:
// every read and write is asynchronous, and a client's payload is never
// read before its header's length has been checked.
#include "group/bootstrap/rendezvous_server.hpp"

#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <cordma/group.hpp>

#include "group/bootstrap/rendezvous_message.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace {

using asio::ip::tcp;
using clock = std::chrono::steady_clock;

// Clients that have not published yet, beyond the ranks expected: more
// are closed at once, so a flood of idle connections cannot exhaust rank
// 0's descriptors.
constexpr std::size_t spare_clients = 64;
// How often waiting ranks hear which ranks have published (so that their
// own timeout can name the missing ones).
constexpr std::chrono::milliseconds status_interval{500};

class server;

class session : public std::enable_shared_from_this<session> {
public:
    session(server& owner, tcp::socket socket, std::string peer)
        : socket_(std::move(socket)), peer_(std::move(peer)), server_(owner) {}

    asio::awaitable<void> run(std::shared_ptr<session> self);
    // Queues a frame; with `then_close`, shuts the socket down once it is out.
    void send(std::vector<std::uint8_t> frame, bool then_close = false, bool is_list = false);
    bool idle() const noexcept { return !writing_; }
    void close() noexcept {
        std::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
    }
    const std::string& peer() const noexcept { return peer_; }

    int rank = -1;

private:
    void write_next();

    tcp::socket socket_;
    std::string peer_;
    server& server_;
    std::deque<std::pair<std::vector<std::uint8_t>, bool>> outbox_;  // frame, is the list
    bool writing_ = false;
    bool close_after_ = false;
};

class server {
public:
    server(const host_port& listen, int world_size, const std::string& own_endpoint, std::string where)
        : acceptor_(io_), timer_(io_), where_(std::move(where)), world_size_(world_size), slots_(world_size) {
        socket_address resolved = resolve(listen);
        tcp::endpoint any(resolved.family() == AF_INET6 ? tcp::v6() : tcp::v4(), listen.port);
        std::error_code ec;
        acceptor_.open(any.protocol(), ec);
        if (!ec)
            acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec)
            acceptor_.bind(any, ec);
        if (!ec)
            acceptor_.listen(asio::socket_base::max_listen_connections, ec);
        if (ec)
            throw std::system_error(ec, "torchrun rendezvous: rank 0 cannot listen on port " +
                                            std::to_string(listen.port) + " (" + where_ +
                                            "): is another job using MASTER_PORT?");
        slots_[0] = slot{own_endpoint, nullptr};
        published_ = 1;
    }

    std::vector<std::string> run(clock::time_point deadline, std::chrono::milliseconds limit) {
        deadline_ = deadline;
        asio::co_spawn(io_, accept_loop(), [this](std::exception_ptr e) { crashed(e); });
        asio::co_spawn(io_, status_loop(), [this](std::exception_ptr e) { crashed(e); });
        io_.run_until(deadline);
        if (failure_)
            std::rethrow_exception(failure_);
        if (list_)
            return *list_;
        // Ranks that never published, and ranks that did but whose
        // connection ended before the others came (their own deadline, a
        // crash): both are missing from the list.
        std::vector<int> missing;
        std::string never, gone;
        for (int r = 0; r < world_size_; ++r)
            if (!slots_[r]) {
                missing.push_back(r);
                std::string& names = left_.count(r) ? gone : never;
                names += (names.empty() ? "" : ", ") + std::to_string(r);
            }
        std::string message = "torchrun rendezvous (" + where_ + "): not every rank published its endpoint within " +
                              std::to_string(limit.count()) + " ms (WORLD_SIZE=" + std::to_string(world_size_) + ")";
        if (!never.empty())
            message += "; never published: rank" + std::string(never.find(',') != std::string::npos ? "s " : " ") +
                       never;
        if (!gone.empty())
            message += "; published, then left before the list was complete: rank" +
                       std::string(gone.find(',') != std::string::npos ? "s " : " ") + gone;
        if (!refusals_.empty())
            message += "; refused meanwhile: " + refusals_;
        throw group_error(std::errc::timed_out, message, std::move(missing));
    }

    // A client's publish: "" when taken, else why it is refused.
    std::string publish(const std::shared_ptr<session>& from, const rendezvous_publish& p) {
        std::string refusal;
        auto rank = static_cast<int>(p.rank);
        if (list_)
            refusal = "the rendezvous is already complete";
        else if (p.world_size != static_cast<std::uint32_t>(world_size_))
            refusal = "rank " + std::to_string(p.rank) + " has WORLD_SIZE=" + std::to_string(p.world_size) +
                      " but rank 0 has WORLD_SIZE=" + std::to_string(world_size_) +
                      ": every rank must be started with the same WORLD_SIZE";
        else if (rank == 0)
            refusal = "a client says it is rank 0, but rank 0 is the rendezvous itself: two processes have RANK=0";
        else if (slots_[rank] && slots_[rank]->endpoint != p.endpoint)
            refusal = "rank " + std::to_string(rank) + " has already published " + slots_[rank]->endpoint +
                      " (from " + slots_[rank]->from->peer() + "), this client says " + p.endpoint +
                      ": two processes have RANK=" + std::to_string(rank);
        if (!refusal.empty()) {
            refusals_ += (refusals_.empty() ? "" : "; ") + refusal;
            return refusal;
        }
        if (slots_[rank]) {
            // The same endpoint again: the same process, reconnected before
            // its old connection's end reached us. The new one replaces it.
            slots_[rank]->from->rank = -1;
            slots_[rank]->from->close();
        } else {
            ++published_;
        }
        slots_[rank] = slot{p.endpoint, from};
        left_.erase(rank);
        from->rank = rank;
        --unpublished_;
        changed_ = true;
        if (published_ == world_size_)
            finish();
        else
            from->send(encode_rendezvous_status(published()));
        return {};
    }

    // A published rank's connection ended before the list went out: its
    // slot is free again (the process may come back).
    void withdraw(const std::shared_ptr<session>& from, const std::string& why) {
        // At the deadline every rank gives up at about the same time: their
        // leaving then is not news, and would hide who never came.
        if (list_ || clock::now() >= deadline_ || from->rank < 0 || !slots_[from->rank] ||
            slots_[from->rank]->from != from)
            return;
        left_.insert(from->rank);
        detail::logf(log_level::warning,
                     "cordma: torchrun rendezvous (%s): rank %d (from %s) left before every rank had "
                     "published: %s",
                     where_.c_str(), from->rank, from->peer().c_str(), why.c_str());
        slots_[from->rank].reset();
        from->rank = -1;
        --published_;
        changed_ = true;
    }

    void drop(const std::shared_ptr<session>& s, const std::string& why) {
        detail::logf(log_level::warning, "cordma: torchrun rendezvous (%s): closed the client from %s: %s",
                     where_.c_str(), s->peer().c_str(), why.c_str());
        if (s->rank < 0)
            --unpublished_;
        s->close();
        sessions_.erase(s);
    }

    // A refused client: its refusal is on its way, it no longer counts.
    void forget(const std::shared_ptr<session>& s) {
        --unpublished_;
        sessions_.erase(s);
    }

    void list_sent() {
        if (--lists_pending_ == 0)
            io_.stop();
    }

    bool complete() const noexcept { return list_.has_value(); }

private:
    struct slot {
        std::string endpoint;
        std::shared_ptr<session> from;  // null for rank 0 itself
    };

    asio::awaitable<void> accept_loop() {
        while (!list_) {
            std::error_code ec;
            tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                if (ec == asio::error::operation_aborted)
                    co_return;
                // Out of descriptors and the like: say so, and give the
                // system a moment instead of spinning on the same error.
                detail::logf(log_level::error, "cordma: torchrun rendezvous (%s): accept: %s", where_.c_str(),
                             ec.message().c_str());
                timer_.expires_after(std::chrono::milliseconds(50));
                co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                continue;
            }
            std::string peer = "?";
            if (auto remote = socket.remote_endpoint(ec); !ec)
                peer = remote.address().to_string() + ":" + std::to_string(remote.port());
            auto s = std::make_shared<session>(*this, std::move(socket), peer);
            if (unpublished_ >= static_cast<std::size_t>(world_size_) + spare_clients) {
                drop(s, "too many clients that have not published");
                continue;
            }
            ++unpublished_;
            sessions_.insert(s);
            asio::co_spawn(io_, s->run(s), [this](std::exception_ptr e) { crashed(e); });
        }
    }

    asio::awaitable<void> status_loop() {
        asio::steady_timer tick(io_);
        while (!list_) {
            tick.expires_after(status_interval);
            std::error_code ec;
            co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            if (list_ || !changed_)
                continue;
            changed_ = false;
            auto frame = encode_rendezvous_status(published());
            // A client still reading the last one skips this one: a slow
            // reader never makes rank 0 queue without bound.
            for (auto& s : slots_)
                if (s && s->from && s->from->idle())
                    s->from->send(frame);
        }
    }

    std::vector<bool> published() const {
        std::vector<bool> out(slots_.size());
        for (std::size_t r = 0; r < slots_.size(); ++r)
            out[r] = slots_[r].has_value();
        return out;
    }

    void finish() {
        list_.emplace();
        for (auto& s : slots_)
            list_->push_back(s->endpoint);
        std::error_code ignored;
        acceptor_.close(ignored);
        timer_.cancel();
        auto frame = encode_rendezvous_list(*list_);
        lists_pending_ = world_size_ - 1;
        for (auto& s : slots_)
            if (s->from)
                s->from->send(frame, true, true);
        // Clients that never published are closed: nothing more for them.
        for (auto it = sessions_.begin(); it != sessions_.end();)
            if ((*it)->rank < 0) {
                (*it)->close();
                it = sessions_.erase(it);
            } else {
                ++it;
            }
    }

    void crashed(std::exception_ptr e) {
        if (e && !failure_) {
            failure_ = e;
            io_.stop();
        }
    }

    asio::io_context io_;
    tcp::acceptor acceptor_;
    asio::steady_timer timer_;
    std::string where_;
    int world_size_;
    std::vector<std::optional<slot>> slots_;
    int published_ = 0;
    std::size_t unpublished_ = 0;
    bool changed_ = false;
    int lists_pending_ = 0;
    std::optional<std::vector<std::string>> list_;
    std::set<std::shared_ptr<session>> sessions_;
    std::set<int> left_;
    clock::time_point deadline_{};
    std::string refusals_;
    std::exception_ptr failure_;
};

const char* type_name(rendezvous_type type) {
    switch (type) {
    case rendezvous_type::publish: return "publish";
    case rendezvous_type::status: return "status";
    case rendezvous_type::list: return "list";
    case rendezvous_type::refused: return "refused";
    }
    return "?";
}

asio::awaitable<void> session::run(std::shared_ptr<session> self) {
    std::error_code ec;
    std::array<std::uint8_t, rendezvous_header_size> head{};
    co_await asio::async_read(socket_, asio::buffer(head), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        if (ec != asio::error::operation_aborted)
            server_.drop(self, "closed before it published anything (" + ec.message() + ")");
        co_return;
    }
    rendezvous_header header;
    try {
        header = decode_rendezvous_header(head);
    } catch (const std::invalid_argument& e) {
        server_.drop(self, e.what());
        co_return;
    }
    if (header.type != rendezvous_type::publish) {
        server_.drop(self, std::string("sent a ") + type_name(header.type) + " frame; clients send publish");
        co_return;
    }
    std::vector<std::uint8_t> payload(header.length);
    std::size_t got = co_await asio::async_read(socket_, asio::buffer(payload),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        if (ec != asio::error::operation_aborted)
            server_.drop(self, "truncated publish: its header promised " + std::to_string(header.length) +
                                   " bytes, the connection ended after " + std::to_string(got) + " (" +
                                   ec.message() + ")");
        co_return;
    }
    rendezvous_publish publish;
    try {
        publish = decode_rendezvous_publish(payload);
    } catch (const std::invalid_argument& e) {
        server_.drop(self, e.what());
        co_return;
    }
    if (std::string refusal = server_.publish(self, publish); !refusal.empty()) {
        detail::logf(log_level::warning, "cordma: torchrun rendezvous: refused the client from %s: %s", peer_.c_str(),
                     refusal.c_str());
        send(encode_rendezvous_refused(refusal), true);
        server_.forget(self);
        co_return;
    }
    // A published rank sends nothing more: the read only ends when its
    // connection does (or it breaks the protocol), and frees its rank.
    std::array<std::uint8_t, 1> extra{};
    co_await asio::async_read(socket_, asio::buffer(extra), asio::redirect_error(asio::use_awaitable, ec));
    if (server_.complete() || ec == asio::error::operation_aborted)
        co_return;
    server_.withdraw(self, ec ? "its connection ended (" + ec.message() + ")" : "it sent bytes after its publish");
    server_.drop(self, ec ? "its connection ended" : "it sent bytes after its publish");
}

void session::send(std::vector<std::uint8_t> frame, bool then_close, bool is_list) {
    outbox_.emplace_back(std::move(frame), is_list);
    close_after_ = close_after_ || then_close;
    if (!writing_)
        write_next();
}

void session::write_next() {
    if (outbox_.empty()) {
        writing_ = false;
        if (close_after_) {
            std::error_code ignored;
            socket_.shutdown(tcp::socket::shutdown_send, ignored);
        }
        return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(outbox_.front().first),
                      [self = shared_from_this()](std::error_code ec, std::size_t) {
                          bool was_list = self->outbox_.front().second;
                          self->outbox_.pop_front();
                          if (was_list)
                              self->server_.list_sent();
                          if (ec) {
                              // Lists that will never go out still count as
                              // done: rank 0 does not wait for a dead client.
                              for (auto& [frame, list] : self->outbox_)
                                  if (list)
                                      self->server_.list_sent();
                              self->outbox_.clear();
                              self->writing_ = false;
                              self->close();
                              return;
                          }
                          self->write_next();
                      });
}

}  // namespace

std::vector<std::string> serve_rendezvous(const host_port& listen, int world_size, const std::string& own_endpoint,
                                          clock::time_point deadline, const std::string& where) {
    if (world_size == 1)
        return {own_endpoint};
    auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    server s(listen, world_size, own_endpoint, where);
    return s.run(deadline, limit);
}

}  // namespace cordma::detail
