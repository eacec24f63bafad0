// group::send, recv, recv_any and their started forms: point-to-point
// messages between two ranks, as message frames on their link (op
// `message`, the tag in `root`, a per-destination number in `seq` that
// the fin of a large one names), matched on the receiving side by the
// group's mailbox. Deadlines and stops are checked by the group's ticks,
// which also keep the peers' keepalives going while a message waits.
#include <cordma/group.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <cordma/error.hpp>

#include "group/group_core.hpp"
#include "group/mailbox.hpp"

namespace cordma {

namespace detail {

namespace wire = link_wire;

class group_core::p2p_scope {
public:
    p2p_scope(group_core& core, const group_call& call)
        : core_(core),
          timeout_(call.timeout.count() > 0 ? call.timeout : core.options().operation_timeout),
          user_stop_(call.stop) {
        auto now = coarse_clock::now();
        // Beyond a year is "forever" (and no overflow in the sum).
        deadline_ = timeout_ < std::chrono::hours(24 * 365) ? now + timeout_ + coarse_clock::resolution()
                                                            : coarse_clock::time_point::max();
        if (call.stop.stop_possible())
            forwarding_.emplace(call.stop, forward{stop_});
        core_.p2p_calls_.push_back(this);
        core_.tick_at(std::min(deadline_, now + tick_interval));
    }
    ~p2p_scope() { std::erase(core_.p2p_calls_, this); }
    p2p_scope(const p2p_scope&) = delete;
    p2p_scope& operator=(const p2p_scope&) = delete;

    std::stop_token token() const noexcept { return stop_.get_token(); }
    bool stopped_by_caller() const noexcept { return user_stop_.stop_requested(); }
    std::chrono::milliseconds timeout() const noexcept { return timeout_; }
    coarse_clock::time_point deadline() const noexcept { return deadline_; }
    void expire() { stop_.request_stop(); }

private:
    struct forward {
        std::stop_source source;
        void operator()() noexcept { source.request_stop(); }
    };
    group_core& core_;
    std::chrono::milliseconds timeout_;
    coarse_clock::time_point deadline_;
    std::stop_token user_stop_;
    std::stop_source stop_;
    std::optional<std::stop_callback<forward>> forwarding_;
};

coarse_clock::time_point group_core::expire_p2p_calls(coarse_clock::time_point now) {
    auto earliest = coarse_clock::time_point::max();
    // Stopping posts the waits' wake-ups (nothing resumes inside this loop).
    for (p2p_scope* c : p2p_calls_) {
        if (now >= c->deadline())
            c->expire();
        else
            earliest = std::min(earliest, c->deadline());
    }
    return earliest;
}

void group_core::throw_stopped(const p2p_scope& scope, const std::string& what) const {
    if (scope.stopped_by_caller())
        throw group_error(std::errc::operation_canceled, prefix() + what + " was stopped by its stop token", {});
    throw group_error(std::errc::timed_out,
                      prefix() + what + " timed out after " + std::to_string(scope.timeout().count()) +
                          " ms (group_call::timeout, or group_options::operation_timeout)",
                      {});
}

mailbox& group_core::mail() {
    if (!mailbox_)
        mailbox_ = std::make_shared<mailbox>(weak_from_this(), event_listener_, size(), options_.window);
    return *mailbox_;
}

task<void> group_core::send_message(int dest, local_slice payload, std::uint32_t tag, group_call call) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    if (failure_)
        throw_failure();
    p2p_scope scope(*this, call);
    peer_link& l = link(dest);
    wire::header h;
    h.op = wire::op::message;
    h.seq = mail().next_seq(dest);
    h.root = tag;
    h.trace = call.trace;
    auto what = [&] {
        return "send of " + std::to_string(payload.size()) + " bytes to " + rank_name(dest) + " (tag " +
               std::to_string(tag) + ")";
    };
    std::size_t slot = 0;
    bool stopped = false;
    try {
        if (l.needs_room(payload.size()))
            co_await l.make_room(payload.size(), scope.token());
        slot = co_await l.credit_and_slot(scope.token());
    } catch (const operation_cancelled&) {
        stopped = true;
    }
    if (stopped)
        throw_stopped(scope, what() + ", waiting for credit (nothing was sent; the group goes on),");
    if (payload.size() <= l.inline_room()) {
        l.post_inline(slot, h, std::span<const std::byte>(payload.data(), payload.size()));
        co_return;
    }
    auto fin = mail().expect_fin(dest, h.seq);
    l.post_rts(slot, h, payload);
    try {
        co_await mail().wait_fin(fin, scope.token());
    } catch (const operation_cancelled&) {
        stopped = true;
    }
    if (stopped) {
        // Announced but not read: the peer may read the buffer whenever
        // its recv comes, so neither side can go on safely.
        bool by_caller = scope.stopped_by_caller();
        fail(by_caller ? std::errc::operation_canceled : std::errc::timed_out,
             what() + (by_caller ? " was stopped by its stop token"
                                 : " timed out after " + std::to_string(scope.timeout().count()) + " ms") +
                 " before the receiver had read it (its recv had not come); its buffer could still be read",
             -1, true);
        throw_failure();
    }
}

task<message_info> group_core::recv_message(int source, local_slice into, std::uint32_t tag, group_call call) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    if (failure_)
        throw_failure();
    p2p_scope scope(*this, call);
    std::optional<mailbox::entry> got;
    bool stopped = false;
    try {
        got.emplace(co_await mail().take(source, tag, into.size(), scope.token()));
    } catch (const operation_cancelled&) {
        stopped = true;
    }
    if (stopped) {
        std::string what = std::string(source < 0 ? "recv_any" : "recv from " + rank_name(source)) +
                           (tag == group::any_tag ? "" : " (tag " + std::to_string(tag) + ")");
        throw_stopped(scope, what + " (nothing was taken; the group goes on)");
    }
    mailbox::entry& e = *got;
    peer_link& l = link(e.source);
    const wire::header& h = e.frame.header;
    if (h.type == wire::frame::rts) {
        co_await l.fetch(e.frame, into.slice(0, h.size));
        l.send_fin(h);
        if (e.how == mailbox::entry::state::held)
            l.release(e.frame);
    } else if (e.how == mailbox::entry::state::copied) {
        if (h.size != 0)
            std::memcpy(into.data(), e.bytes.data(), h.size);
    } else {
        if (h.size != 0)
            std::memcpy(into.data(), wire::payload(e.frame.message.bytes(), h).data(), h.size);
        l.release(e.frame);
    }
    co_return message_info{e.source, h.root, static_cast<std::size_t>(h.size), h.trace};
}

}  // namespace detail

namespace {

void check_rank(const detail::group_core& core, const char* call, const char* what, int r) {
    if (r < 0 || r >= core.size() || r == core.rank())
        throw std::out_of_range(std::string("cordma::group::") + call + ": " + what + " is rank " + std::to_string(r) +
                                "; rank " + std::to_string(core.rank()) + " exchanges messages with ranks 0.." +
                                std::to_string(core.size() - 1) + " except itself");
}

}  // namespace

task<void> group::send(int dest, local_slice buffer, std::uint32_t tag, group_call call) {
    auto& core = checked("send");
    check_rank(core, "send", "dest", dest);
    if (tag == any_tag)
        throw std::invalid_argument("cordma::group::send: tag is group::any_tag, which only a recv may use");
    auto state = state_;
    co_await state->send_message(dest, std::move(buffer), tag, std::move(call));
}

task<message_info> group::recv(int source, local_slice buffer, std::uint32_t tag, group_call call) {
    auto& core = checked("recv");
    check_rank(core, "recv", "source", source);
    auto state = state_;
    co_return co_await state->recv_message(source, std::move(buffer), tag, std::move(call));
}

task<message_info> group::recv_any(local_slice buffer, std::uint32_t tag, group_call call) {
    auto& core = checked("recv_any");
    if (core.size() < 2)
        throw std::logic_error("cordma::group::recv_any: a group of one rank has nobody to receive from");
    auto state = state_;
    co_return co_await state->recv_message(-1, std::move(buffer), tag, std::move(call));
}

pending<void> group::start_send(int dest, local_slice buffer, std::uint32_t tag, group_call call) {
    return start(send(dest, std::move(buffer), tag, std::move(call)));
}

pending<message_info> group::start_recv(int source, local_slice buffer, std::uint32_t tag, group_call call) {
    return start(recv(source, std::move(buffer), tag, std::move(call)));
}

pending<message_info> group::start_recv_any(local_slice buffer, std::uint32_t tag, group_call call) {
    return start(recv_any(std::move(buffer), tag, std::move(call)));
}

}  // namespace cordma
