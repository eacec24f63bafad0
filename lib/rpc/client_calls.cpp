// cordma::rpc::client, one call: a credit, the request frame (inline, or
// lent to the server to read by rendezvous), the wait for the answer, and
// what ends it early: its deadline (one timer for the earliest of the
// calls'), its stop token, or a liveness read of the server that fails.
#include "rpc/client_state.hpp"
#include "connect/registration_pds.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <stop_token>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "engine/delay.hpp"

namespace cordma::rpc::detail {

task<void> client_state::run(pending_call& c, std::uint32_t method, std::span<const std::byte> request,
                             call_options o) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    c.id = take_id();
    c.method = method;
    c.began_tick = *turn_tick_;
    c.began_ms = *turn_ms_;
    c.request_size = request.size();
    c.trace = o.trace;
    tally_.calls.add();
    if (!c.trace.empty()) {
        std::string name;
        c.span.open(span_of(c, name));
    }
    // Refused at once: counted, and its span closed, as any other end.
    if (broken_ || request.size() > server_max_request_) {
        rpc_errc why = broken_ ? broken_->first : rpc_errc::too_large;
        finish(c, why,
               what_call(c) + ": " +
                   (broken_ ? broken_->second
                            : "a request of " + std::to_string(request.size()) +
                                  " bytes, over the server's max_request of " + std::to_string(server_max_request_)));
        throw rpc_error(why, c.message);
    }
    // Whatever ends the call (an answer, the deadline, the token, the
    // coroutine being destroyed) leaves nothing pointing at `c`.
    struct guard {
        client_state* self;
        pending_call* c;
        ~guard() {
            // Its caller's coroutine destroyed before an end: counted as
            // cancelled, so calls made always add up.
            if (!c->finished) {
                c->finished = true;
                self->tally_.error(rpc_errc::cancelled);
                if (c->span.is_open()) {
                    std::string name;
                    c->span.close(self->span_of(*c, name), make_error_code(rpc_errc::cancelled));
                }
            }
            self->forget(*c);
            if (c->has_credit && !c->sent) {  // never used: back to the next call
                ++self->available_;
                c->has_credit = false;
                self->grant();
            }
        }
    } g{this, &c};
    track(c);
    c.limit = o.deadline.count() > 0 ? o.deadline : options_.deadline;
    c.deadline = coarse_clock::now() + c.limit + coarse_clock::resolution();
    watch_deadline(c.deadline);
    std::weak_ptr<client_state> weak = weak_from_this();
    std::uint64_t id = c.id;
    std::optional<std::stop_callback<std::function<void()>>> on_stop;
    if (o.token.stop_possible()) {
        auto el = event_listener_;
        on_stop.emplace(o.token, std::function<void()>([weak, id, el] {
                            el->post([weak, id] {
                                if (auto s = weak.lock())
                                    s->fail(id, rpc_errc::cancelled, "cancelled through its stop token");
                            });
                        }));
    }
    if (!liveness_running_)
        spawn_detached(liveness_loop(), [](std::exception_ptr) {});

    if (available_ > 0 && credit_waiters_.empty()) {
        --available_;
        c.has_credit = true;
    } else {
        credit_waiters_.push_back(&c);
        co_await wait_for{&c, true};
    }
    if (!c.finished) {
        wire::header h;
        h.id = c.id;
        h.code = method;
        // A server that does not read trace ids (an older cordma) gets
        // none: the call's own span and stuck report still have it.
        if (server_reads_traces_)
            h.trace = c.trace;
        std::span<const std::byte> inline_bytes;
        std::string error;
        local_mr buffer;
        std::size_t header = 0;
        try {
            if (request.size() <= server_eager_) {
                h.type = wire::frame::request;
                h.size = request.size();
                inline_bytes = request;
            } else {
                // On every rail of the builder, so the server's read is striped.
                c.registration = register_local_mr(cordma::detail::registration_pds(builder_, request.size()),
                                                   const_cast<std::byte*>(request.data()), request.size(),
                                                   access_flags::remote_read);
                h.type = wire::frame::request_rts;
                h.size = request.size();
                h.addr = reinterpret_cast<std::uint64_t>(request.data());
                wire::set_key(h, c.registration.remote());
            }
            header = wire::header_length(h);
            buffer = buffers_.take(header + inline_bytes.size());
            wire::encode(h, buffer.bytes());
            if (!inline_bytes.empty())
                std::memcpy(buffer.data() + header, inline_bytes.data(), inline_bytes.size());
        } catch (const std::exception& e) {
            error = e.what();
        }
        if (!error.empty())
            finish(c, rpc_errc::too_large, what_call(c) + ": could not prepare the request: " + error);
        if (!c.finished) {
            c.sent = true;
            bool send_failed = false;
            try {
                co_await conn_.send(buffer.slice(0, header + inline_bytes.size()));
            } catch (const std::exception& e) {
                send_failed = true;
                error = e.what();
            }
            if (send_failed)
                broken(rpc_errc::server_gone, "sending a request failed: " + error);
        }
        buffers_.give(std::move(buffer));
        co_await wait_for{&c, false};
    }
    on_stop.reset();
    if (c.error)
        throw rpc_error(*c.error, c.message);
}

void client_state::watch_deadline(coarse_clock::time_point when) {
    if (when >= armed_for_)
        return;  // the timer fires before this deadline, and re-arms for it then
    if (deadline_timer_)
        deadline_timer_->cancel();
    armed_for_ = when;
    std::weak_ptr<client_state> weak = weak_from_this();
    auto delay = std::max<std::chrono::nanoseconds>(when - coarse_clock::now(), std::chrono::nanoseconds(0));
    deadline_timer_ = event_listener_->call_after(delay, [weak] {
        if (auto s = weak.lock())
            s->on_deadline();
    });
}

void client_state::on_deadline() {
    armed_for_ = coarse_clock::time_point::max();
    deadline_timer_.reset();
    auto now = coarse_clock::now();
    std::vector<std::uint64_t> expired;
    auto next = coarse_clock::time_point::max();
    for (const auto& [id, c] : calls_) {
        if (c->deadline <= now)
            expired.push_back(id);
        else
            next = std::min(next, c->deadline);
    }
    for (std::uint64_t id : expired) {
        auto it = calls_.find(id);
        if (it != calls_.end())
            fail(id, rpc_errc::timed_out,
                 "no answer within its deadline of " + std::to_string(it->second->limit.count()) + " ms");
    }
    if (next != coarse_clock::time_point::max())
        watch_deadline(next);
}

task<void> client_state::liveness_loop() {
    auto self = shared_from_this();
    liveness_running_ = true;
    while (!calls_.empty() && !broken_) {
        co_await cordma::detail::after(*event_listener_, liveness_interval);
        if (calls_.empty() || broken_)
            break;
        // The read is answered by the server's device, not its process: it
        // fails only if the server's host (or the link) is gone. Waiting
        // for the QP's retries is not enough: the user's builder may set
        // retry_count 7, which rxe retries forever, and a call that sends
        // nothing while it waits has no retries running at all.
        std::string error;
        std::stop_source give_up;
        auto limit = event_listener_->call_after(liveness_timeout, [give_up]() mutable { give_up.request_stop(); });
        try {
            co_await conn_.read(liveness_local_.all(), liveness_word_, give_up.get_token());
        } catch (const operation_cancelled&) {
            error = "no answer within " + std::to_string(liveness_timeout.count()) + " ms";
        } catch (const std::exception& e) {
            error = e.what();
        }
        limit->cancel();
        if (!error.empty())
            conn_.shut_down();
        if (!error.empty()) {
            broken(rpc_errc::server_gone, "the server stopped answering (a liveness read failed: " + error + ")");
            break;
        }
    }
    liveness_running_ = false;
}

}  // namespace cordma::rpc::detail
