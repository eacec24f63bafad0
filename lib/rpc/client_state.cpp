// cordma::rpc::client, its state: the reader of the receive queue and the
// server's frames (responses, credits, rendezvous reads of large
// responses), credits handed to waiting calls, and the ending of calls
// (answered, failed, or all at once when the connection breaks).
#include "rpc/client_state.hpp"
#include "connect/registration_pds.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "engine/event_listener_access.hpp"
#include "engine/receive_refill.hpp"

namespace cordma::rpc::detail {

client_state::client_state(builder b, client_options options, cordma::connection conn, const wire::header& hello)
    : builder_(std::move(b)),
      options_(options),
      conn_(std::move(conn)),
      peer_(conn_.peer()),
      event_listener_(conn_.event_listener()),
      buffers_(builder_.pool()),
      credits_(hello.credits),
      available_((hello.code >> 16) & wire::hello_deferred_credits ? 0 : hello.credits),
      server_eager_(hello.size),
      server_max_request_(hello.addr),
      liveness_word_{hello.id, 8, hello.rkey, access_flags::remote_read} {
    liveness_local_ = builder_.pool()->allocate(8);
    turn_tick_ = cordma::detail::event_listener_access::turn_tick(*event_listener_);
    turn_ms_ = cordma::detail::event_listener_access::turn_ms(*event_listener_);
    qp_num_ = conn_.qp()->qp_num();
    server_reads_traces_ = ((hello.code >> 16) & wire::hello_traces) != 0;
    pending_source_.emplace(event_listener_, &client_state::collect_pending, this);
    // Spare nodes for as many calls as the server lets run at once, and as
    // many waiting for a credit; beyond that a call may allocate its node.
    spare_nodes_.reserve(2 * std::size_t(std::max<std::uint32_t>(credits_, 16)));
}

void client_state::start() {
    // Room for every response (one per credit) and the credit frames the
    // server may send besides (at most one per credit as well).
    std::size_t count = 2 * std::size_t(credits_) + 2;
    std::size_t room = conn_.qp()->capacity().max_recv_wr;
    if (room < std::size_t(credits_) + 2)
        throw std::invalid_argument("cordma::rpc::client::connect(" + peer_ + "): the server grants " +
                                    std::to_string(credits_) + " calls in flight, and the builder's " +
                                    "recv_queue_depth (" + std::to_string(room) + ") cannot hold their responses: " +
                                    "raise it to " + std::to_string(count));
    std::size_t big = options_.eager_size + wire::header_size;
    std::size_t small = std::min(big, wire::small_receive);
    receives_.emplace(conn_, std::min(count, room), small, builder_.pool());
    if (small < big) {
        elastic_ = std::make_shared<cordma::detail::elastic_receives>(builder_.pool(), receives_->size(), small, big);
        cordma::detail::receive_queue_access::set_refill(*receives_, elastic_);
    }
    spawn_detached(read_loop(), [](std::exception_ptr) {});
}

task<void> client_state::read_loop() {
    auto self = shared_from_this();
    for (;;) {
        received_message m;
        std::string why;
        try {
            m = co_await receives_->next();
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (!why.empty()) {
            broken(rpc_errc::server_gone, "the connection broke: " + why);
            co_return;
        }
        on_frame(std::move(m));
        if (broken_)
            co_return;
    }
}

void client_state::on_frame(received_message m) {
    std::string why;
    auto h = wire::decode(m.bytes(), why);
    if (!h) {
        spawn_detached(conn_.close(), [](std::exception_ptr) {});
        return broken(rpc_errc::protocol, "the server sent a malformed frame (" + why + "); connection closed");
    }
    bool answer = h->type == wire::frame::response || h->type == wire::frame::response_rts;
    bool room = h->type == wire::frame::grow || h->type == wire::frame::shrink || h->type == wire::frame::pad;
    if (room && !elastic_) {
        spawn_detached(conn_.close(), [](std::exception_ptr) {});
        return broken(rpc_errc::protocol, std::string("the server sent a ") + wire::name(h->type) +
                                              " frame, but this client's receives do not grow; connection closed");
    }
    if (!answer && !room && h->type != wire::frame::credit) {
        spawn_detached(conn_.close(), [](std::exception_ptr) {});
        return broken(rpc_errc::protocol, std::string("the server sent a ") + wire::name(h->type) +
                                              " frame, which only a client sends; connection closed");
    }
    available_ += h->credits;
    if (h->type == wire::frame::grow)
        grow_receives();  // before the release: this frame's receive comes back big
    else if (h->type == wire::frame::shrink)
        elastic_->shrink();
    if (answer) {
        orphans_.erase(h->id);  // answered: the server is done with its request
        auto it = calls_.find(h->id);
        pending_call* c = it == calls_.end() ? nullptr : it->second;
        if (c != nullptr)
            c->registration = {};  // answered: the server is done reading its request
        if (h->type == wire::frame::response) {
            if (c != nullptr) {
                auto payload = m.bytes().subspan(wire::inline_header_size);
                if (h->code == 0) {
                    deliver(*c, payload);
                } else {
                    finish_error(*c, h->code, payload);
                }
            }
        } else if (c == nullptr) {
            spawn_detached(send_done(h->id), [](std::exception_ptr) {});  // nobody waits for it any more
        } else if (h->size > options_.max_response) {
            finish(*c, rpc_errc::too_large,
                   what_call(*c) + ": a response of " + std::to_string(h->size) +
                       " bytes, over the client's max_response of " + std::to_string(options_.max_response));
            spawn_detached(send_done(h->id), [](std::exception_ptr) {});
        } else if (h->code == 0 && c->into_mode && h->size > c->into.size()) {
            finish(*c, rpc_errc::too_large, too_large_for_buffer(*c, h->size));
            spawn_detached(send_done(h->id), [](std::exception_ptr) {});
        } else {
            spawn_detached(fetch(h->id, *h), [](std::exception_ptr) {});
        }
    }
    m.release();
    grant();
    if (h->type == wire::frame::credit && h->size > 0 && available_ > 0) {
        // The server asks for unused credits back (others wait for them):
        // what no call is waiting for goes back.
        auto give = static_cast<std::uint32_t>(std::min<std::uint64_t>(h->size, available_));
        available_ -= give;
        spawn_detached(send_release(give), [](std::exception_ptr) {});
    }
}

task<void> client_state::fetch(std::uint64_t id, wire::header h) {
    auto self = shared_from_this();
    std::vector<std::byte> bytes(h.size);
    std::string error;
    try {
        local_mr into = register_local_mr(cordma::detail::registration_pds(builder_, bytes.size()), bytes.data(), bytes.size(),
                                          access_flags::local_write);
        remote_slice from = wire::where(h);
        co_await conn_.read(into.all(), from);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (!error.empty()) {
        fail(id, rpc_errc::server_gone, "reading the response of " + std::to_string(h.size) + " bytes failed: " + error);
        co_return;
    }
    co_await send_done(id);
    auto it = calls_.find(id);
    if (it != calls_.end()) {
        if (h.code == 0) {
            if (it->second->into_mode)
                deliver(*it->second, bytes);
            else {
                it->second->response = std::move(bytes);
                finish(*it->second, std::nullopt, {});
            }
        } else {  // an error whose message was too long for the receives
            finish_error(*it->second, h.code, bytes);
        }
    }
}

void client_state::grow_receives() {
    bool grown = true;
    try {
        elastic_->grow();
    } catch (const std::exception&) {
        grown = false;  // no memory for them: the answer keeps the small room
    }
    std::uint64_t first = receives_->size() + cordma::detail::receive_queue_access::reposts(*receives_);
    room_answer_.emplace(first, grown ? options_.eager_size : wire::small_receive - wire::header_size);
}

task<void> client_state::send_done(std::uint64_t id) {
    // The call's credit still covers this frame: the server hands it back
    // once it has the done.
    wire::header h;
    h.type = wire::frame::done;
    h.id = id;
    if (room_answer_) {  // answers the server's grow
        h.addr = room_answer_->first;
        h.size = room_answer_->second;
        h.code = static_cast<std::uint32_t>(receives_->size());
        room_answer_.reset();
    }
    return send_header(h);
}

task<void> client_state::send_release(std::uint32_t credits) {
    // Sent on one of the credits it hands back: the server has a receive
    // for it.
    wire::header h;
    h.type = wire::frame::release;
    h.credits = credits;
    return send_header(h);
}

task<void> client_state::send_header(wire::header h) {
    auto self = shared_from_this();
    local_mr buffer = buffers_.take(wire::header_size);
    wire::encode(h, buffer.bytes().first<wire::header_size>());
    try {
        co_await conn_.send(buffer.slice(0, wire::header_size));
    } catch (...) {  // the connection broke: the reader ends the calls
    }
    buffers_.give(std::move(buffer));
}

void client_state::grant() {
    while (available_ > 0 && !credit_waiters_.empty()) {
        pending_call* c = credit_waiters_.front();
        credit_waiters_.pop_front();
        --available_;
        c->has_credit = true;
        if (c->waiter)
            c->waiter.resume();
    }
}

void client_state::finish(pending_call& c, std::optional<rpc_errc> error, std::string message) {
    if (c.finished)
        return;
    c.finished = true;
    if (error) {
        tally_.error(*error);
    } else {
        tally_.answered.add();
        tally_.latency.record(*turn_tick_ - c.began_tick);
    }
    c.error = error;
    c.message = std::move(message);
    if (c.span.is_open()) {
        std::string name;
        c.span.close(span_of(c, name), error ? make_error_code(*error) : std::error_code{});
    }
    forget(c);
    if (c.waiter)
        c.waiter.resume();
}

void client_state::track(pending_call& c) {
    if (spare_nodes_.empty()) {
        calls_.emplace(c.id, &c);
        return;
    }
    auto node = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    node.key() = c.id;
    node.mapped() = &c;
    calls_.insert(std::move(node));
}

void client_state::forget(pending_call& c) noexcept {
    if (auto it = calls_.find(c.id); it != calls_.end() && it->second == &c) {
        auto node = calls_.extract(it);
        // Kept for the next call while the vector has room: growing it
        // would be an allocation of its own (the node is freed instead).
        if (spare_nodes_.size() < spare_nodes_.capacity())
            spare_nodes_.push_back(std::move(node));
    }
    if (auto it = std::find(credit_waiters_.begin(), credit_waiters_.end(), &c); it != credit_waiters_.end())
        credit_waiters_.erase(it);
    if (c.registration && c.sent && !broken_) {
        try {
            orphans_.emplace(c.id, std::move(c.registration));
        } catch (...) {
        }
    }
}

void client_state::deliver(pending_call& c, std::span<const std::byte> payload) {
    if (!c.into_mode) {
        c.response.assign(payload.begin(), payload.end());
    } else if (payload.size() > c.into.size()) {
        return finish(c, rpc_errc::too_large, too_large_for_buffer(c, payload.size()));
    } else {
        if (!payload.empty())
            std::memcpy(c.into.data(), payload.data(), payload.size());
        c.size = payload.size();
    }
    finish(c, std::nullopt, {});
}

void client_state::finish_error(pending_call& c, std::uint32_t code, std::span<const std::byte> message) {
    auto error = code <= static_cast<std::uint32_t>(rpc_errc::server_gone) ? static_cast<rpc_errc>(code)
                                                                           : rpc_errc::protocol;
    finish(c, error, what_call(c) + ": " + std::string(reinterpret_cast<const char*>(message.data()), message.size()));
}

void client_state::fail(std::uint64_t id, rpc_errc error, std::string message) {
    auto it = calls_.find(id);
    if (it != calls_.end())
        finish(*it->second, error, what_call(*it->second) + ": " + message);
}

void client_state::broken(rpc_errc error, const std::string& why) {
    if (!broken_)
        broken_.emplace(error, why);
    orphans_.clear();
    while (!calls_.empty()) {
        pending_call* c = calls_.begin()->second;
        finish(*c, error, what_call(*c) + ": " + why);
    }
}

void client_state::shut_down(rpc_errc why, const std::string& message) noexcept {
    conn_.shut_down();
    std::weak_ptr<client_state> weak = weak_from_this();
    try {
        event_listener_->post([weak, why, message] {
            if (auto self = weak.lock())
                self->broken(why, message);
        });
    } catch (...) {
    }
}

task<void> client_state::close(std::string why) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    broken(rpc_errc::cancelled, why);
    co_await conn_.close();
}

span_info client_state::span_of(const pending_call& c, std::string& name) const {
    name = "method " + std::to_string(c.method);
    span_info s;
    s.kind = span_kind::rpc_call;
    s.trace = c.trace;
    s.method = c.method;
    s.name = name;
    s.peer = peer_;
    s.id = c.id;
    s.bytes = c.request_size;
    return s;
}

void client_state::collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out) {
    const auto* client = static_cast<const client_state*>(self);
    for (const auto& [id, c] : client->calls_) {
        if (c->finished)
            continue;
        pending_operation p;
        p.peer = client->peer_;
        p.qp_num = client->qp_num_;
        p.role = "data";
        p.stage = pending_stage::rpc_call;
        p.age = cordma::detail::age_of(now_ms, c->began_ms);
        p.bytes = c->request_size;
        p.what = "rpc call #" + std::to_string(c->id) + " to method " + std::to_string(c->method) +
                 (c->sent ? "" : c->has_credit ? " (not sent yet)" : " (waiting for a credit to send)");
        p.trace = c->trace;
        out.push_back(std::move(p));
    }
}

}  // namespace cordma::rpc::detail
