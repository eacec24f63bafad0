#pragma once
/// The deadline and cancellation of one agent call: one stop token that
/// stops when the caller's token does or when the deadline passes, and the
/// error the caller sees for each. Event listener thread only.

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include <cordma/agent_call.hpp>
#include <cordma/error.hpp>
#include <cordma/event_listener.hpp>

namespace cordma::detail {

class call_deadline {
public:
    /// `timeout`: the call's own (agent_call::timeout), 0 for `fallback`.
    call_deadline(event_listener& el, const agent_call& call, std::chrono::milliseconds fallback)
        : user_(call.stop), timeout_(call.timeout.count() > 0 ? call.timeout : fallback) {
        if (user_.stop_possible())
            forward_.emplace(user_, forward{source_});
        // Beyond a year is "forever": no timer (and no overflow in the sum).
        if (timeout_ < std::chrono::hours(24 * 365))
            timer_ = el.call_after(timeout_, [source = source_]() mutable { source.request_stop(); });
    }
    ~call_deadline() {
        if (timer_)
            timer_->cancel();
    }
    call_deadline(const call_deadline&) = delete;
    call_deadline& operator=(const call_deadline&) = delete;

    /// Stops when the caller's token does, or when the deadline passes.
    std::stop_token token() const noexcept { return source_.get_token(); }

    /// What to throw once a wait on token() was cancelled: the caller's own
    /// operation_cancelled, or timed_out_error saying `outcome` (what became
    /// of the call and the connection).
    [[noreturn]] void fail(const char* call, const std::string& peer, const std::string& waiting_for,
                           const std::string& outcome) const {
        if (user_.stop_requested())
            throw operation_cancelled(call, peer);
        throw timed_out_error(call, peer,
                              "timed out after " + std::to_string(timeout_.count()) + " ms " + waiting_for +
                                  " (builder::agent_timeout, or agent_call::timeout for one call). " + outcome);
    }

private:
    struct forward {
        std::stop_source source;
        void operator()() noexcept { source.request_stop(); }
    };

    std::stop_token user_;
    std::chrono::milliseconds timeout_;
    std::stop_source source_;
    std::optional<std::stop_callback<forward>> forward_;
    std::shared_ptr<event_listener::timer> timer_;
};

}  // namespace cordma::detail
