#include "link/peer_link.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <utility>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "log/logf.hpp"


namespace cordma::detail {

namespace wire = link_wire;

namespace {

std::string module_of(const std::weak_ptr<link_owner>& owner) {
    auto o = owner.lock();
    return o ? o->module_name() : "link";
}

[[noreturn]] void throw_owner_gone(const std::string& module, const std::string& name) {
    throw std::system_error(std::make_error_code(std::errc::connection_aborted),
                            "cordma " + module + ": " + name + ": its " + module + " is gone");
}

}  // namespace

peer_link::peer_link(std::weak_ptr<link_owner> core, int rank, std::string name, cordma::connection conn,
                     receive_queue queue, std::uint32_t own_window, std::uint32_t peer_window,
                     std::size_t eager_size, std::size_t receive_eager, std::shared_ptr<memory_pool> pool)
    : core_(std::move(core)),
      module_(module_of(core_)),
      receive_call_(module_ + " receive"),
      send_call_(module_ + " send"),
      event_listener_(conn.event_listener()),
      rank_(rank),
      name_(std::move(name)),
      conn_(std::move(conn)),
      queue_(std::move(queue)),
      own_window_(own_window),
      peer_window_(peer_window),
      eager_size_(eager_size),
      receive_eager_(receive_eager),
      pool_(std::move(pool)),
      receives_(std::make_shared<elastic_receives>(pool_, queue_.size(), first_frame_size(receive_eager),
                                                    frame_size(receive_eager))),
      small_slot_size_(first_frame_size(eager_size)),
      small_slot_count_(slot_count(peer_window)),
      big_slot_size_(frame_size(eager_size)),
      big_slot_count_(std::size_t(peer_window) + 4),
      room_before_(std::min(eager_size, small_payload)),  // small_room()
      room_after_(room_before_),
      room_answered_(waiter_queue<bool>::make(event_listener_)),
      slot_freed_(waiter_queue<bool>::make(event_listener_)),
      credits_(waiter_queue<bool>::make(event_listener_)),
      inbox_(waiter_queue<inbound_frame>::make(event_listener_)),
      fins_(waiter_queue<wire::header>::make(event_listener_)),
      idle_(waiter_queue<bool>::make(event_listener_)) {
    small_slots_ = pool_->allocate(small_slot_count_ * small_slot_size_);
    free_slots_.reserve(small_slot_count_);
    for (std::size_t i = small_slot_count_; i-- > 0;)
        free_slots_.push_back(i);
    free_big_.reserve(big_slot_count_);
    receive_queue_access::set_refill(queue_, receives_);
    for (std::uint32_t i = 0; i < peer_window_; ++i)
        credits_->push(true);
}

void peer_link::start() {
    spawn_detached(dispatch(), [](std::exception_ptr) {});
}

task<void> peer_link::dispatch() {
    auto self = shared_from_this();
    std::string failure;
    try {
        for (;;) {
            received_message m = co_await queue_.next();
            std::string why;
            std::optional<wire::header> h = wire::decode(m.bytes(), why);
            if (!h) {
                failure = name_ + " sent " + why;
                break;
            }
            on_frame(*h, std::move(m));
            if (abort_received_)
                co_return;
        }
    } catch (const work_completion_error& e) {
        // Flushed: the connection is closing (below). Any other failure of
        // a receive is the peer's frame not fitting it (rxe says
        // IBV_WC_LOC_QP_OP_ERR, other devices IBV_WC_LOC_LEN_ERR).
        if (e.status() == IBV_WC_WR_FLUSH_ERR) {
            connection_lost(e.what());
            co_return;
        }
        failure = name_ + " sent a frame longer than the receive buffer it landed in (" +
                  std::to_string(receives_->grown() ? frame_size(receive_eager_) : first_frame_size(receive_eager_)) +
                  " bytes now; " + e.what() + ")";
    } catch (const std::exception& e) {
        // The connection is gone (closed by the peer once it was done, or
        // broken). What already arrived stays to be taken: a peer that
        // finishes its last step and closes must not fail a peer still
        // taking that step's frames. A step that finds nothing left fails
        // the owner then (link_gone).
        connection_lost(e.what());
        co_return;
    }
    if (auto core = core_.lock())
        core->fail(std::errc::protocol_error, failure, rank_, true);
}

void peer_link::connection_lost(const std::string& why) {
    mark_lost(why);
    inbox_->close_keeping_values();
}

void peer_link::mark_lost(const std::string& why) {
    if (lost_)
        return;
    lost_ = true;
    gone_reason_ = why;
    credits_->close();
    slot_freed_->close();
    room_answered_->close();
    fins_->close_keeping_values();
    if (sink_) {
        auto sink = sink_;  // it may drop this link's reference while told
        sink->link_lost(*this, why);
    }
}

void peer_link::send_failed(const std::string& why) {
    if (lost_)
        return;
    mark_lost(why);
    // Frames that arrived before the connection broke may still be in the
    // completion queue: a peer that closes as soon as its last frames are
    // delivered breaks the connection (an rdma_cm event, seen at once: the
    // sends of credits and fins fail) before the dispatcher has taken them.
    // They are still this side's, so the inbox stays open for them until
    // the dispatcher ends (every receive flushed) or, since rxe may flush
    // late, for a grace period.
    std::weak_ptr<peer_link> weak = weak_from_this();
    event_listener_->call_after(lost_grace, [weak] {
        if (auto self = weak.lock())
            self->inbox_->close_keeping_values();
    });
}

void peer_link::link_gone() const {
    if (auto core = core_.lock()) {
        if (!core->failed())
            core->fail(std::errc::connection_aborted,
                       name_ + " went away: " + (gone_reason_.empty() ? "its connection closed" : gone_reason_), rank_,
                       true);
        core->throw_failure();
    }
    throw_owner_gone(module_, name_);
}

void peer_link::on_frame(wire::header h, received_message m) {
    ++frames_heard_;
    if (h.type != wire::frame::abort)
        credit_returned(h.acked);
    switch (h.type) {
    case wire::frame::data:
    case wire::frame::rts:
        if (h.type == wire::frame::data && h.size > receive_eager_) {
            if (auto core = core_.lock())
                core->fail(std::errc::protocol_error,
                           name_ + " sent " + std::to_string(h.size) + " bytes inline, over the eager size " +
                               std::to_string(receive_eager_),
                           rank_, true);
            return;
        }
        if (sink_ && h.op == wire::op::message) {
            sink_->arrived(*this, inbound_frame{h, std::move(m)});
            return;
        }
        inbox_->push(inbound_frame{h, std::move(m)});
        return;
    case wire::frame::fin:
        if (sink_ && h.op == wire::op::message) {
            m.release();
            sink_->fin_arrived(*this, h);
            return;
        }
        fins_->push(h);
        return;
    case wire::frame::credit:
        return;
    case wire::frame::grow:
        m.release();
        on_grow();
        return;
    case wire::frame::room:
        m.release();
        on_room(h);
        return;
    case wire::frame::shrink:
        m.release();
        receives_->shrink();
        return;
    case wire::frame::pad:
        m.release();
        if (h.extra == 0)
            count_handled();  // a shrink's pad, sent with credit
        return;
    case wire::frame::ping: {
        m.release();
        wire::header pong;
        pong.type = wire::frame::credit;
        if (!free_slots_.empty())
            send_control(pong);
        return;
    }
    case wire::frame::abort: {
        abort_received_ = true;
        auto bytes = wire::payload(m.bytes(), h);
        std::string reason(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        int at_fault = h.root < 0x10000 ? static_cast<int>(h.root) : rank_;
        if (auto core = core_.lock())
            core->fail(std::errc::connection_aborted, name_ + " aborted: " + reason, at_fault, false);
        return;
    }
    case wire::frame::hello:
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error, name_ + " sent a second hello", rank_, true);
        return;
    }
}

void peer_link::credit_returned(std::uint32_t acked) {
    std::uint32_t newly = acked - peer_acked_;
    std::uint32_t outstanding = sent_ - peer_acked_;
    if (newly > outstanding) {
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error,
                       name_ + " acknowledged " + std::to_string(newly) + " frames but only " +
                           std::to_string(outstanding) + " were outstanding",
                       rank_, true);
        return;
    }
    peer_acked_ = acked;
    for (std::uint32_t i = 0; i < newly; ++i)
        credits_->push(true);
}

task<void> peer_link::make_room(std::size_t bytes, std::stop_token token) {
    if (!needs_room(bytes))
        co_return;
    auto self = shared_from_this();
    if (growth_ == growth::small) {
        growth_ = growth::asked;
        wire::header h;
        h.type = wire::frame::grow;
        send_control(h);
    }
    counted_wait waiting(room_waiters_);
    std::optional<bool> answered = co_await room_answered_->pop(token, send_call_, name_);
    (void)answered;  // nothing: the link is gone, and the send that follows says so
}

void peer_link::set_room(std::uint64_t n, std::size_t room) noexcept {
    if (next_frame_ >= room_switch_)
        room_before_ = room_after_;
    room_switch_ = n;
    room_after_ = room;
}

void peer_link::on_grow() {
    // Every receive posted from now on is big; the peer's frame number
    // `first` lands in the first of them.
    try {
        receives_->grow();
    } catch (const std::exception& e) {
        // No memory for it: the answer grants no more room (the peer's
        // larger frames go as rts from then on).
        detail::logf(log_level::warning, "cordma %s: %s asked for room, but %s", module_.c_str(), name_.c_str(),
                     e.what());
    }
    wire::header room;
    room.type = wire::frame::room;
    room.addr = queue_.size() + receive_queue_access::reposts(queue_);
    room.size = receives_->grown() ? receive_eager_ : std::min(receive_eager_, small_payload);  // its small room
    send_control(room);
}

void peer_link::on_room(const wire::header& h) {
    if (growth_ != growth::asked || (h.size != eager_size_ && h.size != small_room())) {
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error,
                       name_ + " granted room for " + std::to_string(h.size) + " bytes, unasked or not its " +
                           std::to_string(eager_size_) + "-byte inline size",
                       rank_, true);
        return;
    }
    auto answer_waiters = [this] {
        for (std::uint32_t i = 0; i < room_waiters_; ++i)
            room_answered_->push(true);
    };
    if (h.size == small_room()) {
        growth_ = growth::refused;  // the peer had no memory for it
        answer_waiters();
        return;
    }
    if (!big_slots_) {
        try {
            big_slots_ = pool_->allocate(big_slot_count_ * big_slot_size_);
        } catch (const std::exception& e) {
            detail::logf(log_level::warning, "cordma %s: no send slots for larger frames to %s (%s): they go as rts",
                         module_.c_str(), name_.c_str(), e.what());
            growth_ = growth::refused;
            wire::header shrink;
            shrink.type = wire::frame::shrink;
            send_control(shrink);
            answer_waiters();
            return;
        }
        for (std::size_t i = big_slot_count_; i-- > 0;)
            free_big_.push_back(small_slot_count_ + i);
    }
    // The peer's receives before frame h.addr are small, and posted: pads
    // (handled at once, no credit) fill them, so the next data frame finds a
    // big one without waiting for the peer's reader. Data frames wait for
    // pending control frames, so none goes before the pads.
    if (h.addr > next_frame_ + pending_control_.size() + receive_count(peer_window_)) {
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error,
                       name_ + " granted room from its receive " + std::to_string(h.addr) + ", more than its " +
                           std::to_string(receive_count(peer_window_)) + " receives ahead of this side's frame " +
                           std::to_string(next_frame_),
                       rank_, true);
        return;
    }
    set_room(h.addr, eager_size_);
    while (next_frame_ + pending_control_.size() < h.addr) {
        wire::header pad;
        pad.type = wire::frame::pad;
        pad.extra = 1;  // not credit-counted
        send_control(pad);
    }
    growth_ = growth::grown;
    wake_slot_waiters();
    arm_idle_check();
    answer_waiters();
}

void peer_link::arm_idle_check() {
    std::weak_ptr<peer_link> weak = weak_from_this();
    std::uint64_t before = big_frames_;
    idle_timer_ = event_listener_->call_after(idle_check, [weak, before] {
        if (auto self = weak.lock())
            self->check_idle(before);
    });
}

void peer_link::check_idle(std::uint64_t big_frames_before) {
    idle_timer_.reset();
    if (growth_ != growth::grown || lost_ || conn_.is_broken())
        return;
    if (big_frames_ != big_frames_before || senders_waiting_ > 0) {
        arm_idle_check();
        return;
    }
    // Nothing needed the room for a whole check: give it back. Frames from
    // now on are small; the shrink says so, and a window of pads cycles
    // the peer's big receives out (they are posted: only frames free them).
    growth_ = growth::small;
    set_room(next_frame_, small_room());
    wire::header shrink;
    shrink.type = wire::frame::shrink;
    send_control(shrink);
    wake_slot_waiters();
    if (!big_slots_ || free_big_.size() == big_slot_count_) {
        free_big_.clear();
        big_slots_ = local_mr{};
    }
    spawn_detached(send_pads(static_cast<std::uint32_t>(receive_count(peer_window_))), [](std::exception_ptr) {});
}

task<void> peer_link::send_pads(std::uint32_t count) {
    auto self = shared_from_this();
    for (std::uint32_t i = 0; i < count && growth_ == growth::small && !lost_; ++i) {
        std::stop_token none;
        std::size_t slot = co_await credit_and_slot(none);
        ++pads_sent_;
        wire::header h;
        h.type = wire::frame::pad;
        h.acked = handled_;
        acked_sent_ = handled_;
        wire::encode(h, std::span<std::byte, wire::header_size>(slot_data(slot), wire::header_size));
        post_slot(slot, wire::header_size);
    }
}

void peer_link::throw_owner_failure() const {
    if (auto core = core_.lock())
        core->throw_failure();
    throw_owner_gone(module_, name_);
}

std::string peer_link::describe(const wire::header& h) const {
    std::string s = op_name(h.op) + " #" + std::to_string(h.seq) + " (step " +
                    std::to_string(h.step) + ", root " + std::to_string(h.root) + ", " + std::to_string(h.size) +
                    " bytes";
    if (auto core = core_.lock())
        s += core->describe_extra(h);
    return s + ")";
}

std::string peer_link::describe(const expected_frame& e) const {
    wire::header h;
    h.op = e.op;
    h.seq = e.seq;
    h.step = e.step;
    h.root = e.root;
    h.extra = e.extra;
    h.size = e.size;
    return describe(h);
}

std::string peer_link::op_name(wire::op o) const {
    auto core = core_.lock();
    return core ? core->op_name(o) : wire::name(o);
}

void peer_link::probe(coarse_clock::time_point now, std::chrono::milliseconds patience) {
    if (lost_ || conn_.is_broken())
        return;
    if (ping_outstanding_) {
        if (frames_heard_ != heard_at_ping_)
            ping_outstanding_ = false;  // answered (by the pong or anything else)
        else if (now - ping_sent_ > patience) {
            // RC retries cannot be relied on to notice (on rxe, sends to a
            // powered-off host neither completed nor failed for a minute,
            // with a retry count of 6 or 7; and nothing is sent while a
            // side only waits), so silence is what tells.
            connection_lost("no answer to a keepalive for " + std::to_string(patience.count()) +
                            " ms: its host is down, unreachable or stopped");
            return;
        }
    }
    if (ping_outstanding_ || free_slots_.size() < 4)
        return;
    ping_outstanding_ = true;
    ping_sent_ = now;
    heard_at_ping_ = frames_heard_;
    wire::header h;
    h.type = wire::frame::ping;
    send_control(h);
}

void peer_link::send_abort(std::uint32_t rank_at_fault, const std::string& why) {
    if (abort_sent_ || free_slots_.empty() || conn_.is_broken())
        return;
    abort_sent_ = true;
    wire::header h;
    h.type = wire::frame::abort;
    h.root = rank_at_fault;
    send_control(h, why.substr(0, max_abort_reason));
}

void peer_link::close_soon() {
    spawn_detached(
        [](std::shared_ptr<peer_link> self) -> task<void> {
            std::stop_source stop;
            auto timer = self->event_listener_->call_after(std::chrono::seconds(2), [stop]() mutable { stop.request_stop(); });
            if (!self->lost_ && !self->conn_.is_broken()) {
                try {
                    std::stop_token token = stop.get_token();
                    co_await self->drain(token);
                } catch (const std::exception&) {
                    // 2 s passed: close anyway (what is in flight is flushed).
                }
            }
            timer->cancel();
            co_await self->conn_.close();
        }(shared_from_this()),
        [](std::exception_ptr) {});
}

task<void> peer_link::drain(std::stop_token token) {
    auto self = shared_from_this();
    if (in_flight_ == 0)
        co_return;
    drain_waiting_ = true;
    bool cancelled = false;
    try {
        std::optional<bool> idle = co_await idle_->pop(token, module_ + " close", name_);
        (void)idle;
    } catch (const operation_cancelled&) {
        cancelled = true;
    }
    if (cancelled) {
        drain_waiting_ = false;
        throw operation_cancelled((module_ + " close").c_str(), name_, "frames still in flight");
    }
}

void peer_link::close_queues() {
    credits_->close();
    slot_freed_->close();
    room_answered_->close();
    inbox_->close();
    fins_->close();
}

}  // namespace cordma::detail
