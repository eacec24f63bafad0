// cordma::rpc::server, one call: a request frame (inline, or read from
// the client by rendezvous), its handler (inline or on the executor), and
// the response (inline, or lent to the client to read), with the credit
// handed back.
#include "rpc/server_state.hpp"
#include "connect/registration_pds.hpp"

#include <algorithm>
#include <stdexcept>

namespace cordma::rpc::detail {

namespace {

/// Resumes the awaiting coroutine inside a function handed to `executor`.
struct via_executor {
    const std::function<void(std::function<void()>)>* executor;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { (*executor)([h] { h.resume(); }); }
    void await_resume() const noexcept {}
};

std::string method_list(const std::map<std::uint32_t, handler_entry>& handlers) {
    std::string out;
    for (const auto& [method, entry] : handlers)
        out += (out.empty() ? "" : ", ") + std::to_string(method) + " " + entry.name;
    return out.empty() ? "none" : out;
}

}  // namespace

void server_state::on_frame(std::shared_ptr<session> s, received_message m) {
    if (s->gone)
        return;
    std::string why;
    auto h = wire::decode(m.bytes(), why);
    if (!h)
        return violation(s, "a malformed frame: " + why);
    if (h->credits != 0 && h->type != wire::frame::release)
        return violation(s, std::string("a ") + wire::name(h->type) + " frame handing back credits (" +
                                std::to_string(h->credits) + "), which only a release frame does");
    switch (h->type) {
    case wire::frame::request:
    case wire::frame::request_rts: {
        if (s->charged >= s->granted)
            return violation(s, "a call beyond its " + std::to_string(s->granted) + " credits");
        ++s->charged;
        ++s->requests;
        ++s->active;
        ++s->in_progress;
        ++active_;
        spawn_detached(run_call(s, *h, std::move(m)), [](std::exception_ptr) {});
        return;
    }
    case wire::frame::done: {
        auto it = s->lent.find(h->id);
        if (it == s->lent.end())
            return violation(s, "a done frame for call " + std::to_string(h->id) +
                                    ", which has no response waiting to be read");
        if (h->size != 0 && !take_room(s, *h, why))
            return violation(s, why);
        s->lent.erase(it);
        m.release();  // before its credit is handed on: the receive is posted again first
        credit_back(s);
        // Hand the credit back now unless a response is about to carry it.
        if (s->active == 0 && s->unreturned > 0)
            send_credits(s);
        return;
    }
    case wire::frame::release: {
        std::uint32_t unused = s->granted - s->charged - s->unreturned;
        if (h->credits == 0 || h->credits > unused)
            return violation(s, "a release of " + std::to_string(h->credits) + " credits, when it holds " +
                                    std::to_string(unused) + " unused");
        m.release();
        s->granted -= h->credits;
        granted_total_ -= h->credits;
        s->asked_back = false;
        // Below its share now (with more clients than receives, none): in
        // line again, as the server cannot tell when its next call comes.
        want(s);
        top_up();
        return;
    }
    default:
        return violation(s, std::string("a ") + wire::name(h->type) + " frame, which only a server sends");
    }
}

task<void> server_state::run_call(std::shared_ptr<session> s, wire::header h, received_message m) {
    auto self = shared_from_this();
    std::uint32_t status = 0;
    std::string message;
    std::vector<std::byte> response;
    local_mr reply;              // handle_into's: the response frame, filled in place
    std::size_t reply_size = 0;  // ... this much of its payload
    std::unique_ptr<std::byte[]> large;  // a large request, read from the client
    local_mr large_mr;
    std::span<const std::byte> payload;
    bool read_failed = false;
    auto found = handlers_.find(h.code);
    const handler_entry* entry = found != handlers_.end() ? &found->second : any_ ? &*any_ : nullptr;
    // Counted here and where the call ends, on the event listener thread
    // (server::metrics).
    handler_entry::tally* counts = entry != nullptr ? entry->counts.get() : nullptr;
    std::uint64_t began_tick = *turn_tick_;
    if (counts != nullptr)
        counts->calls.add();
    else
        view_->unknown.add();
    // In the stuck report until it ends; a traced call's span meanwhile.
    running_call running(running_, h.id, h.code, &s->peer, s->qp_num, *turn_ms_, h.size, h.trace);
    running.open_span(entry != nullptr ? &entry->name : nullptr);

    if (h.type == wire::frame::request) {
        payload = m.bytes().subspan(wire::header_length(h));
    } else {
        m.release();  // the frame is only its header: give the receive back at once
        if (h.size > options_.max_request) {
            status = static_cast<std::uint32_t>(rpc_errc::too_large);
            message = "a request of " + std::to_string(h.size) + " bytes, over the server's max_request of " +
                      std::to_string(options_.max_request);
        } else if (entry != nullptr) {
            try {
                large.reset(new std::byte[h.size]);
                large_mr = register_local_mr(cordma::detail::registration_pds(builder_, h.size), large.get(), h.size,
                                             access_flags::local_write);
                remote_slice from = wire::where(h);
                co_await s->conn.read(large_mr.all(), from);
                payload = std::span<const std::byte>(large.get(), h.size);
            } catch (const std::exception& e) {
                read_failed = true;
                message = e.what();
            }
        }
    }
    if (read_failed) {
        // The client's memory could not be read: its connection is broken.
        large_mr = {};
        if (counts != nullptr)
            counts->fail(rpc_errc::protocol);
        running.ended(make_error_code(rpc_errc::protocol));
        call_finished(*s);
        violation(s, "reading its request of " + std::to_string(h.size) + " bytes failed: " + message);
        co_return;
    }
    if (status == 0 && entry == nullptr) {
        status = static_cast<std::uint32_t>(rpc_errc::unknown_method);
        message = "no method " + std::to_string(h.code) + " on this server (it has: " + method_list(handlers_) + ")";
    }
    if (status == 0) {
        bool hopped = false;
        try {
            // handle_into's frame holds the most the client can take inline
            // (its eager size): taken before the handler runs, written by it.
            std::size_t cap = std::max(s->room_small, s->room_big);
            if (entry->fills)
                reply = buffers_.take(wire::inline_header_size + cap);
            running.at("in its handler");
            if (options_.executor) {
                hopped = true;
                co_await via_executor{&options_.executor};
            }
            if (entry->fills) {
                reply_size = co_await entry->fills(request(payload, h.code, &s->peer, h.trace),
                                                   reply.bytes().subspan(wire::inline_header_size, cap));
                if (reply_size > cap)
                    throw std::length_error("it returned " + std::to_string(reply_size) + " bytes for a reply of " +
                                            std::to_string(cap));
            } else {
                response = co_await entry->returns(request(payload, h.code, &s->peer, h.trace));
            }
        } catch (const std::exception& e) {
            status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
            message = "method " + std::to_string(h.code) + " (" + entry->name + ") failed: " + e.what();
        } catch (...) {
            status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
            message = "method " + std::to_string(h.code) + " (" + entry->name +
                      ") failed: it threw something not derived from std::exception";
        }
        if (hopped || !event_listener_->running_in_this_thread())
            co_await event_listener_->schedule();
    }
    m.release();
    large_mr = {};
    large.reset();

    if (s->gone || shut_) {
        if (reply)
            buffers_.give(std::move(reply));
        if (counts != nullptr)
            counts->abandoned.add();
        call_finished(*s);
        co_return;
    }
    wire::header out;
    out.id = h.id;
    std::span<const std::byte> inline_bytes;
    // What the client's next receive holds (elastic receives: less than
    // its eager size until it has grown them, client_room.cpp).
    std::size_t room_now = room(*s);
    if (reply && (status != 0 || reply_size > room_now)) {
        // Failed, or more than the client's receives hold now (they are
        // small until a response needs them grown): the vector's way.
        if (status == 0)
            response.assign(reply.data() + wire::inline_header_size,
                            reply.data() + wire::inline_header_size + reply_size);
        buffers_.give(std::move(reply));
    }
    // Lends `bytes` for the client to read (response_rts); if they cannot
    // be registered, the call fails instead (`message` says why).
    auto lend = [&](std::vector<std::byte> bytes, std::uint32_t code) {
        try {
            lent_response lent;
            lent.registration = register_local_mr(cordma::detail::registration_pds(builder_, bytes.size()), bytes.data(),
                                                  bytes.size(), access_flags::remote_read);
            out.type = wire::frame::response_rts;
            out.code = code;
            out.size = bytes.size();
            out.addr = reinterpret_cast<std::uint64_t>(bytes.data());
            wire::set_key(out, lent.registration.remote());
            lent.bytes = std::move(bytes);
            s->lent.emplace(h.id, std::move(lent));
        } catch (const std::exception& e) {
            status = static_cast<std::uint32_t>(rpc_errc::handler_failed);
            message = std::string("could not register the response for the client to read: ") + e.what();
        }
    };
    if (status == 0 && response.size() > room_now) {
        if (response.size() > s->client_max_response) {
            status = static_cast<std::uint32_t>(rpc_errc::too_large);
            message = "a response of " + std::to_string(response.size()) + " bytes, over the client's max_response of " +
                      std::to_string(s->client_max_response);
        } else {
            // The client reads it from here, then says done (which
            // returns the call's credit).
            lend(std::move(response), 0);
        }
    }
    if (status != 0 && message.size() > room_now && s->room_big != 0 && message.size() <= s->client_max_response) {
        // An error's message longer than the client's receives: lent too
        // (a client whose receives grow reads errors so).
        auto text = std::as_bytes(std::span<const char>(message.data(), message.size()));
        lend(std::vector<std::byte>(text.begin(), text.end()), status);
    }
    if (out.type == wire::frame::response_rts) {
        ask_room(s, out.size);  // its grow goes first: the done answers it
    } else {
        out.type = wire::frame::response;
        out.code = status;
        if (status != 0) {
            if (message.size() > room_now)
                message.resize(room_now);
            inline_bytes = std::as_bytes(std::span<const char>(message.data(), message.size()));
        } else {
            inline_bytes = response;
        }
        credit_back(s);
    }
    if (counts != nullptr && status == 0)
        counts->answered.add();
    else if (counts != nullptr)
        counts->fail(static_cast<rpc_errc>(status));
    --s->active;
    running.at("sending its answer");
    running.ended(status == 0 ? std::error_code{} : make_error_code(static_cast<rpc_errc>(status)));
    if (reply)
        co_await send_buffer(s, out, std::move(reply), reply_size);
    else
        co_await send_frame(s, out, inline_bytes);
    // Timed to the answer's send completing (the client's device has it): a
    // handler that answers in the turn its request arrived still takes a
    // round trip, not 0.
    if (counts != nullptr && status == 0 && !s->gone && !s->conn.is_broken())
        counts->latency.record(*turn_tick_ - began_tick);
    answered(*s);
}

void server_state::call_finished(session& s) {
    --s.active;
    --s.charged;
    if (s.gone && s.granted > 0) {
        // Its client is gone (drop() kept this call's credit, whose receive
        // the handler held): back to the budget.
        --s.granted;
        --granted_total_;
        if (!shut_)
            top_up();
    }
    answered(s);
}

void server_state::answered(session& s) {
    if (s.gone)
        return;  // drop() took its calls off the count
    --s.in_progress;
    --active_;
    wake_if_idle();
}

// Not a coroutine: the copy is made now, and the send is send_buffer's
// (one frame per frame sent, not two).
task<void> server_state::send_frame(std::shared_ptr<session> s, wire::header h, std::span<const std::byte> payload) {
    std::size_t header = wire::header_length(h);  // a response_rts: with its rail keys
    local_mr buffer = buffers_.take(header + payload.size());
    if (!payload.empty())
        std::memcpy(buffer.data() + header, payload.data(), payload.size());
    return send_buffer(std::move(s), h, std::move(buffer), payload.size());
}

task<void> server_state::send_buffer(std::shared_ptr<session> s, wire::header h, local_mr buffer, std::size_t size) {
    auto self = shared_from_this();
    if (s->gone) {
        buffers_.give(std::move(buffer));
        co_return;
    }
    h.credits = std::exchange(s->unreturned, 0);
    h.size = h.type == wire::frame::response ? size : h.size;
    // The payload, if any, is at header_length(h.type) already (send_frame,
    // or a handle_into handler's reply).
    std::size_t header = wire::encode(h, buffer.bytes());
    bool failed = false;
    // Numbered as posted (the send is posted before this coroutine first
    // suspends): frame n lands in the client's receive n.
    ++s->frames_sent;
    if (size > s->room_small)
        ++s->big_frames;
    try {
        co_await s->conn.send(buffer.slice(0, header + size));
    } catch (...) {
        failed = true;  // the connection broke: ended() (or its reader) drops the session
    }
    buffers_.give(std::move(buffer));
    if (failed && !s->gone && s->conn.is_broken() && !srq_)
        drop(s->qp_num, "a send failed");
}

}  // namespace cordma::rpc::detail
