#include "group/group_core.hpp"

#include <exception>
#include <stdexcept>
#include <utility>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>
#include <cordma/when_all.hpp>

#include "engine/event_listener_access.hpp"

namespace cordma::detail {

namespace wire = link_wire;

group_core::group_core(cordma::builder b, group_options options, int rank, std::vector<std::string> endpoints)
    : builder_(std::move(b)),
      options_(std::move(options)),
      rank_(rank),
      endpoints_(std::move(endpoints)),
      event_listener_(builder_.event_listener()),
      turn_tick_(event_listener_access::turn_tick(*event_listener_)),
      links_(endpoints_.size()) {
    turn_ms_ = event_listener_access::turn_ms(*event_listener_);
    pending_source_.emplace(event_listener_, &group_core::collect_pending, this);
}

void group_core::collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out) {
    const auto* g = static_cast<const group_core*>(self);
    if (!g->busy_)
        return;
    pending_operation p;
    p.peer = g->size() == 2 ? std::string("the group's other rank")
                            : "the group's other " + std::to_string(g->size() - 1) + " ranks";
    p.role = "group";
    p.stage = pending_stage::collective;
    p.age = age_of(now_ms, g->began_ms_);
    p.what = group_op_name(g->current_.op) + " #" + std::to_string(g->current_.seq) + " on rank " +
             std::to_string(g->rank_) + " of " + std::to_string(g->size());
    p.trace = g->current_.trace;
    out.push_back(std::move(p));
}

namespace {

// close() is a member coroutine: it must be called on a connection that
// outlives it, so each gets a frame of its own holding its handle.
task<void> close_connection(cordma::connection c) { co_await c.close(); }

}  // namespace

group_core::~group_core() {
    if (closed_)
        return;
    for (auto& l : links_)
        if (l)
            spawn_detached(close_connection(l->connection()), [](std::exception_ptr) {});
}

std::string group_core::rank_name(int r) const {
    return "rank " + std::to_string(r) + " (" + endpoint(r) + ")";
}

void group_core::fail(std::errc code, const std::string& why, int rank_at_fault, bool tell_peers) {
    if (failure_)
        return;
    std::vector<int> ranks;
    if (rank_at_fault >= 0 && rank_at_fault != rank_)
        ranks.push_back(rank_at_fault);
    failure_.emplace(code,
                     prefix() + why +
                         ". The group is broken; form a new one to go on",
                     std::move(ranks));
    std::uint32_t at_fault = static_cast<std::uint32_t>(rank_at_fault >= 0 ? rank_at_fault : rank_);
    for (auto& l : links_) {
        if (!l)
            continue;
        if (tell_peers)
            l->send_abort(at_fault, "rank " + std::to_string(rank_) + " reports: " + why);
        l->close_queues();
    }
    if (mailbox_)
        mailbox_->fail_all();
}

std::string group_core::prefix() const {
    return "cordma::group, rank " + std::to_string(rank_) + " of " + std::to_string(size()) + ": ";
}

std::string group_core::describe_extra(const wire::header& h) const {
    if (h.op != op_of(collective::reduce) && h.op != op_of(collective::all_reduce))
        return {};
    return std::string(", ") + element_name(static_cast<element_type>(h.extra >> 8)) + " " +
           reduce_name(static_cast<reduce_op>(h.extra & 0xff));
}

std::string group_core::mismatch(const std::string& peer, const std::string& sent, const std::string& expected) const {
    return "mismatched collectives: " + peer + " sent " + sent + ", but this rank called " + expected;
}

void group_core::throw_failure() const {
    if (failure_)
        throw *failure_;
    throw std::logic_error("cordma::group: throw_failure without a failure (internal error)");
}

task<void> group_core::run(collective c, group_call call, task<void> body) {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    group_tally::per_kind& counts = tally_[c];
    counts.calls.add();
    std::uint64_t began_tick = *turn_tick_;
    if (failure_) {
        counts.failed.add();
        throw_failure();
    }
    if (busy_) {
        counts.failed.add();
        throw std::logic_error(std::string("cordma::group::") + collective_name(c) + " on rank " + std::to_string(rank_) +
                               ": another collective of this group is in progress; collectives run one at a time "
                               "per group, in the same order on every rank");
    }
    busy_ = true;
    began_ms_ = *turn_ms_;
    current_.op = op_of(c);
    current_.seq = ++next_seq_;
    current_.trace = call.trace;
    // A traced collective's span, closed however it ends.
    std::string span_peer;
    span_info span_of{span_kind::collective, call.trace, 0, collective_name(c), {}, current_.seq, 0};
    struct span_scope {
        traced_span span;
        const span_info* info;
        std::error_code outcome = std::make_error_code(std::errc::connection_aborted);
        ~span_scope() {
            if (span.is_open())
                span.close(*info, outcome);
        }
    } traced{{}, &span_of};
    if (!call.trace.empty()) {
        span_peer = "rank " + std::to_string(rank_) + " of " + std::to_string(size());
        span_of.peer = span_peer;
        traced.span.open(span_of);
    }
    auto timeout = call.timeout.count() > 0 ? call.timeout : options_.operation_timeout;
    // A stop source's state is allocated: a new one only after a
    // collective was stopped (a stop, once requested, stays requested).
    if (stop_.stop_requested())
        stop_ = std::stop_source();
    struct forward {
        std::stop_source source;
        void operator()() noexcept { source.request_stop(); }
    };
    std::optional<std::stop_callback<forward>> forwarding;
    if (call.stop.stop_possible())
        forwarding.emplace(call.stop, forward{stop_});
    // The coarse clock (a few nanoseconds to read, where a precise read
    // costs a microsecond on a slow clock source), its resolution added so
    // that no deadline passes early.
    auto now = coarse_clock::now();
    // Beyond a year is "forever" (and no overflow in the sum).
    deadline_ = timeout < std::chrono::hours(24 * 365) ? now + timeout + coarse_clock::resolution()
                                                       : coarse_clock::time_point::max();
    tick_at(std::min(deadline_, now + tick_interval));
    current_.token = stop_.get_token();

    std::exception_ptr error;
    try {
        co_await std::move(body);
    } catch (...) {
        error = std::current_exception();
    }
    forwarding.reset();
    busy_ = false;
    current_.token = {};
    current_.trace = {};
    if (!error) {
        traced.outcome = {};
        counts.completed.add();
        counts.latency.record(*turn_tick_ - began_tick);
        co_return;
    }
    counts.failed.add();
    if (failure_)
        throw_failure();
    std::string what = std::string(collective_name(c)) + " #" + std::to_string(current_.seq);
    try {
        std::rethrow_exception(error);
    } catch (const operation_cancelled&) {
        traced.outcome = std::make_error_code(call.stop.stop_requested() ? std::errc::operation_canceled
                                                                         : std::errc::timed_out);
        if (call.stop.stop_requested())
            fail(std::errc::operation_canceled, what + " was stopped by its stop token", -1, true);
        else
            fail(std::errc::timed_out,
                 what + " timed out after " + std::to_string(timeout.count()) +
                     " ms (group_call::timeout, or group_options::operation_timeout)",
                 -1, true);
    } catch (const std::exception& e) {
        fail(std::errc::connection_aborted, what + " failed: " + e.what(), -1, true);
    }
    throw_failure();
}

void group_core::tick_at(coarse_clock::time_point at) {
    if (ticking_ && next_tick_ <= at)
        return;
    ticking_ = true;
    next_tick_ = at;
    auto delay = std::max(at - coarse_clock::now(), coarse_clock::duration(0));
    std::weak_ptr<group_core> weak = weak_from_this();
    event_listener_->call_after(delay, [weak, at] {
        auto self = weak.lock();
        if (!self || self->next_tick_ != at)
            return;  // superseded by an earlier tick, or the group is gone
        self->tick();
    });
}

void group_core::tick() {
    ticking_ = false;
    // (next_tick_ still says when this tick was due.)
    if (failure_ || (!busy_ && p2p_calls_.empty()))
        return;
    auto now = coarse_clock::now();
    auto next = now + tick_interval;
    if (busy_) {
        if (now >= deadline_)
            stop_.request_stop();  // its wake-up is posted: the loop below is safe
        else
            next = std::min(next, deadline_);
    }
    next = std::min(next, expire_p2p_calls(now));
    // Still waiting: make sure every peer is still there (a rank whose
    // host powered off sends no disconnect). A tick that comes late means
    // this process was starved of CPU: the peers' answers may be waiting
    // unread, so their silence counts only from now.
    auto late = now - next_tick_;
    for (auto& l : links_)
        if (l) {
            if (late > tick_interval)
                l->excuse_silence(now);
            l->probe(now, options_.peer_timeout);
        }
    tick_at(next);
}

local_slice group_core::scratch(std::size_t size) {
    if (!scratch_ || scratch_.size() < size)
        scratch_ = builder_.pool()->allocate(std::max<std::size_t>(size, 4096));
    return scratch_.slice(0, size);
}

task<void> group_core::close() {
    auto self = shared_from_this();
    if (!event_listener_->running_in_this_thread())
        co_await event_listener_->schedule();
    // Frames this rank posted last (an eager send returns once copied) must
    // reach their peers before the connections go.
    for (auto& l : links_)
        if (l)
            co_await l->drain();
    closed_ = true;
    fail(std::errc::connection_aborted, "closed by this rank (group::close)", -1, false);
    std::vector<task<void>> closing;
    for (auto& l : links_)
        if (l)
            closing.push_back(close_connection(l->connection()));
    co_await when_all(std::move(closing));
}

const char* element_name(element_type type) noexcept {
    switch (type) {
    case element_type::i8: return "int8";
    case element_type::u8: return "uint8";
    case element_type::i16: return "int16";
    case element_type::u16: return "uint16";
    case element_type::i32: return "int32";
    case element_type::u32: return "uint32";
    case element_type::i64: return "int64";
    case element_type::u64: return "uint64";
    case element_type::f32: return "float";
    case element_type::f64: return "double";
    }
    return "?";
}

std::size_t element_size(element_type type) noexcept {
    switch (type) {
    case element_type::i8:
    case element_type::u8: return 1;
    case element_type::i16:
    case element_type::u16: return 2;
    case element_type::i32:
    case element_type::u32:
    case element_type::f32: return 4;
    case element_type::i64:
    case element_type::u64:
    case element_type::f64: return 8;
    }
    return 1;
}

const char* reduce_name(reduce_op op) noexcept {
    switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    }
    return "?";
}

}  // namespace cordma::detail
