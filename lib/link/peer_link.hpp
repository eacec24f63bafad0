#pragma once
/// One process's link to another: the connection, the receives kept
/// posted on it (a receive_queue), and the frames of link_wire.hpp over
/// it, with flow control. The modules run on it (a link per peer); a link
/// reports failures to its link_owner, which words them (docs/link.md).
///
/// Flow control: a side may have at most `window` credit-counted frames
/// (data, rts) to a peer that the peer has not yet handled; every frame
/// carries `acked` (how many of the other side's it has handled), and a
/// bare credit frame goes out once half a window is handled and not yet
/// acknowledged. Control frames (fin, credit, abort) are not counted:
/// they are few (one fin per rts, at most a credit per half window, one
/// abort), so 2 * window + 4 posted receives always have room and no
/// receiver-not-ready can happen.
///
/// Elastic receives: those receives are posted small (first_frame_size)
/// and grow to the full inline size only while the peer sends frames that
/// need it: a sender with a frame over the room it has asks (grow), the
/// receiver makes its reposts big and answers (room) with the number of
/// the sender's first frame that lands in a big one; the sender sends
/// larger frames from there, and until then sends them as rts or in
/// pieces. A sender idle for a second or two says its frames fit small
/// receives again (shrink) and sends a window of pads that cycle the big
/// receives out. Frames are numbered on the connection from the hello (0),
/// and the peer's n-th frame lands in this side's n-th posted receive
/// (docs/link.md).
///
/// A dispatcher coroutine drains the receive_queue as frames arrive: data
/// and rts frames wait in `inbox` for the owner's step that takes them (in
/// order), fins in `fins` for the sender of the rts, credits go straight
/// to the window. Event listener thread only.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <system_error>
#include <stop_token>
#include <string>
#include <vector>

#include <cordma/connection.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task.hpp>

#include "engine/waiter_queue.hpp"
#include "link/elastic_receives.hpp"
#include "core/coarse_clock.hpp"
#include "link/link_wire.hpp"

namespace cordma::detail {

/// Who a link reports to when it fails, and whose words its errors use:
/// the module that owns it (one owner may hold many links). Event listener
/// thread only.
class link_owner {
public:
    virtual ~link_owner() = default;
    /// The link broke (`why`); remember the first reason, wake every wait,
    /// and (tell_peers) send aborts naming `rank_at_fault` (the link's
    /// number for the peer at fault; -1: nobody).
    virtual void fail(std::errc code, const std::string& why, int rank_at_fault, bool tell_peers) = 0;
    virtual bool failed() const noexcept = 0;
    /// Throws the error fail() recorded.
    [[noreturn]] virtual void throw_failure() const = 0;
    /// The owner's word for itself ("stream", "C API"): a link names its
    /// waits with it ("stream receive"), so errors speak the caller's
    /// module.
    virtual const char* module_name() const noexcept { return "link"; }
    /// The name of an op in errors: the owner's for its own ops
    /// (link_wire::module_op), link_wire::name by default.
    virtual std::string op_name(link_wire::op o) const { return link_wire::name(o); }
    /// What the owner adds to a frame's description in errors (say, what
    /// `extra` means for that op); empty by default.
    virtual std::string describe_extra(const link_wire::header&) const { return {}; }
    /// Why a frame that does not match what the owner's step expected
    /// fails: `peer` sent `sent` (described), the step expected `expected`.
    virtual std::string mismatch(const std::string& peer, const std::string& sent, const std::string& expected) const {
        return "mismatched frames: " + peer + " sent " + sent + ", but this side expected " + expected;
    }
};

class peer_link;
struct inbound_frame;

/// Where a link hands its point-to-point message frames (op `message`)
/// and their fins instead of the inbox, when its owner sets one (an owner
/// that matches messages by something other than arrival order). Event
/// listener thread only.
class message_sink {
public:
    virtual ~message_sink() = default;
    /// A data or rts frame of a message arrived on `from`.
    virtual void arrived(peer_link& from, inbound_frame frame) = 0;
    /// The peer read a message this side announced (an rts): its fin.
    virtual void fin_arrived(peer_link& from, const link_wire::header& fin) = 0;
    /// `from`'s connection is gone (why): waits that only it could end
    /// must end.
    virtual void link_lost(peer_link& from, const std::string& why) = 0;
};

/// What the owner's step expects the peer's next frame to say. With op
/// `none`, any data or rts frame is taken as it is (the owner checks it
/// itself, and may keep a frame that does not fit).
struct expected_frame {
    link_wire::op op = link_wire::op::none;
    std::uint32_t seq = 0;
    std::uint16_t step = 0;
    std::uint32_t root = 0;
    std::uint32_t extra = 0;
    std::uint64_t size = 0;
};

/// A frame taken from the inbox: its header and its message (the payload
/// of a data frame is in it; releasing it posts the receive again).
struct inbound_frame {
    link_wire::header header;
    received_message message;
};

class peer_link : public std::enable_shared_from_this<peer_link> {
public:
    /// `queue` already holds this connection's receives (receive_count of
    /// own_window, first_frame_size(receive_eager) bytes each), and each
    /// side has sent its hello (frame 0) and nothing else;
    /// `peer_window` is what the peer's hello granted. `eager_size` is the
    /// most this side sends inline (what the peer's receives hold once
    /// grown), `receive_eager` the most it accepts inline. Send slots and
    /// grown receives come from `pool`. `rank` is the owner's number for
    /// the peer (reported to link_owner::fail), `name` how errors name it.
    /// On the event listener thread.
    peer_link(std::weak_ptr<link_owner> owner, int rank, std::string name, cordma::connection conn,
              receive_queue queue, std::uint32_t own_window, std::uint32_t peer_window, std::size_t eager_size,
              std::size_t receive_eager, std::shared_ptr<memory_pool> pool);

    /// The longest reason an abort carries (it must fit every slot).
    static constexpr std::size_t max_abort_reason = 200;
    /// Bytes of one frame buffer, a posted receive or a send slot: the
    /// header and the largest payload (inline data, or an abort's reason).
    static std::size_t frame_size(std::size_t eager_size) noexcept {
        return link_wire::header_size + (eager_size > max_abort_reason ? eager_size : max_abort_reason);
    }
    /// The inline bytes a link's receives hold before they grow.
    static constexpr std::size_t small_payload = 208;
    /// Bytes of one receive as first posted (and of a control slot): room
    /// for control frames and small data (see the top).
    static std::size_t first_frame_size(std::size_t eager_size) noexcept {
        return frame_size(eager_size < small_payload ? eager_size : small_payload);
    }
    /// How long a sender's grown room goes unused before it gives it back
    /// (checked this often; the second idle check shrinks).
    static constexpr std::chrono::milliseconds idle_check{1000};
    /// Receives a link keeps posted for its own `window` (see the top).
    static std::size_t receive_count(std::uint32_t window) noexcept { return 2 * std::size_t(window) + 4; }
    /// The largest window whose receives fit a receive queue `depth` deep.
    static std::uint32_t largest_window(std::uint32_t depth) noexcept { return depth >= 8 ? (depth - 4) / 2 : 0; }
    /// Send slots for the peer's window: its data and rts frames, as many
    /// fins, and room for credits, pings and an abort.
    static std::size_t slot_count(std::uint32_t peer_window) noexcept { return 2 * std::size_t(peer_window) + 8; }

    int rank() const noexcept { return rank_; }
    /// "rank 2 (10.78.0.3:7600)", "stream peer 10.78.0.3:7600": as errors
    /// name the peer.
    const std::string& name() const noexcept { return name_; }
    const cordma::connection& connection() const noexcept { return conn_; }
    std::size_t eager_size() const noexcept { return eager_size_; }
    /// The most bytes the next inline frame may carry now: eager_size()
    /// once the peer's receives have grown (make_room), less until then.
    std::size_t inline_room() const noexcept {
        return growth_ == growth::grown ? eager_size_ : room_at(next_frame_);
    }
    /// Makes inline_room() at least `bytes` (up to eager_size(); more
    /// returns at once): the first time, or after the link went idle and
    /// shrank, asks the peer to grow its receives and waits for its answer
    /// (one round trip; the peer answers without its reader). Returns
    /// with less room only if the peer had no memory for it, or the link
    /// is gone (the send that follows says so). Throws
    /// operation_cancelled if `token` stops first.
    /// Await it only when needs_room(bytes): a coroutine frame is not free.
    task<void> make_room(std::size_t bytes, std::stop_token token);
    /// Whether make_room(bytes) would ask (or wait): an inline frame of
    /// `bytes` fits the peer's inline size, not its receives yet.
    bool needs_room(std::size_t bytes) const noexcept {
        return bytes > inline_room() && bytes <= eager_size_ && growth_ != growth::refused && !lost_;
    }
    /// Whether this side's receives are grown now (for tests and metrics).
    bool receives_grown() const noexcept { return receives_->grown(); }
    /// Whether this side sends at the peer's grown room now.
    bool sending_grown() const noexcept { return growth_ == growth::grown; }

    /// Starts draining the receive queue.
    void start();
    /// Whether the peer's hello said it reads traced frames (link_wire.hpp):
    /// without, frames go without their trace ids.
    void set_peer_reads_traces(bool yes) noexcept { peer_reads_traces_ = yes; }
    /// From now on, message frames (op `message`) and their fins go to
    /// `sink` instead of the inbox. Before start().
    void set_message_sink(std::shared_ptr<message_sink> sink) { sink_ = std::move(sink); }

    /// Sends `payload` as the frame `h` describes (op, seq, step, root,
    /// extra): inline (copied) up to the eager size, else as an rts the
    /// peer reads from `payload` (which must allow remote reads); then
    /// returns once `payload` may be reused (at once when copied; after the
    /// peer's fin otherwise). Waits for room in the window first.
    task<void> send(link_wire::header h, local_slice payload, std::stop_token token);
    /// The same for a payload of at most eager_size() bytes, copied from
    /// memory that need not be registered.
    task<void> send_inline(link_wire::header h, std::span<const std::byte> payload, std::stop_token token);
    /// Whether an inline frame sent now would go at once: a credit and a
    /// slot are free and nothing waits for them.
    bool can_send_now() const noexcept {
        return credits_->ready() > 0 && data_slot_free() && pending_control_.empty() && slot_waiters_ == 0;
    }
    /// send_inline without waiting, when can_send_now() (and the payload
    /// fits inline_room()): no coroutine frame, for the common case of a
    /// stream's small write.
    void send_inline_now(link_wire::header h, std::span<const std::byte> payload);
    /// Room in the window, then a slot; counts the frame as sent (a
    /// cancelled wait gives the credit back). With post_inline, for a
    /// sender that fills the frame only once it may go (a stream's batch).
    task<std::size_t> credit_and_slot(std::stop_token token);
    /// Encodes `h` as a data frame with `payload` into `slot` (from
    /// credit_and_slot) and posts it.
    void post_inline(std::size_t slot, link_wire::header h, std::span<const std::byte> payload);
    /// Encodes `h` as an rts announcing `payload` (which must allow remote
    /// reads) into `slot` (from credit_and_slot) and posts it; the peer
    /// reads it and answers with a fin.
    void post_rts(std::size_t slot, link_wire::header h, const local_slice& payload);
    /// Data and rts frames sent so far (a send that returned early by
    /// cancellation sent its frame if this moved).
    std::uint32_t frames_sent() const noexcept { return sent_ - pads_sent_; }
    /// Whether the connection is gone (its frames may still be taken).
    bool lost() const noexcept { return lost_; }
    /// Takes the peer's next data or rts frame, which must match `e`
    /// (the owner fails, naming both sides, otherwise), and lands its payload in
    /// `into` (e.size bytes).
    task<void> receive(expected_frame e, local_slice into, std::stop_token token);
    /// Takes the next frame (matching `e`) without landing it: the caller
    /// reads the payload (data) or fetches it (fetch(), rts), then
    /// finish()es it.
    task<inbound_frame> take(expected_frame e, std::stop_token token);
    /// take() of whatever frame comes next, with no coroutine of its own:
    /// the frame at once if one waits, else the inbox's pop to await
    /// (nothing from it: the link is gone, and throw_gone() says why).
    /// For a stream's reads, which expect no particular frame.
    std::optional<inbound_frame> try_take_any() { return inbox_->try_pop(); }
    task<std::optional<inbound_frame>> take_any(std::stop_token token) {
        return inbox_->pop(std::move(token), receive_call_, name_);
    }
    [[noreturn]] void throw_gone() const { link_gone(); }
    /// Reads an rts frame's payload into `into`.
    task<void> fetch(const inbound_frame& f, local_slice into);
    /// Reads into.size() bytes of an rts frame's payload from `offset`.
    task<void> fetch(const inbound_frame& f, std::uint64_t offset, local_slice into);
    /// Done with `f`: sends the fin of an rts, posts the receive again and
    /// counts it (returning credit when half a window is due).
    void finish(inbound_frame& f);
    /// The two halves of finish(), for a frame kept past its receive (a
    /// message nobody asked for yet): release() posts the receive again and
    /// counts the frame (its header and bytes must have been copied out),
    /// send_fin() later tells the sender its rts was read.
    void release(inbound_frame& f);
    void send_fin(const link_wire::header& rts);
    /// The owner's word for itself, as waits and errors name it.
    const std::string& module() const noexcept { return module_; }

    /// Liveness, called once a tick while the owner waits: sends a ping
    /// unless one is unanswered; if one has gone unanswered for longer than
    /// `patience`, the link is lost (naming why).
    void probe(coarse_clock::time_point now, std::chrono::milliseconds patience);
    /// This process was starved until `now`: an unanswered ping counts as
    /// sent now.
    void excuse_silence(coarse_clock::time_point now) {
        if (ping_outstanding_ && frames_heard_ == heard_at_ping_)
            ping_sent_ = now;
    }
    /// Tells the peer the owner failed (best effort, once).
    void send_abort(std::uint32_t rank_at_fault, const std::string& why);
    /// The owner failed: every waiting take, send and fin wait wakes and
    /// throws the owner's error.
    void close_queues();
    /// After its owner failed: closes the connection once the frames in
    /// flight (an abort, say) have left, or 2 s passed; returns at once.
    void close_soon();
    /// Waits until every frame posted so far has completed (sent, or
    /// flushed by a broken connection): before closing. Throws
    /// operation_cancelled if `token` stops first.
    task<void> drain(std::stop_token token = {});

private:
    struct slot_pool;
    task<void> dispatch();
    void on_frame(link_wire::header h, received_message m);
    void credit_returned(std::uint32_t acked);
    /// One of the peer's credit-counted frames handled: credit goes back
    /// once half a window is due.
    void count_handled();
    /// The room the peer's receive for this side's frame `n` holds.
    std::size_t room_at(std::uint64_t n) const noexcept { return n >= room_switch_ ? room_after_ : room_before_; }
    /// From this side's frame `n` on, the peer's receives hold `room`.
    void set_room(std::uint64_t n, std::size_t room) noexcept;
    /// Grow and room, shrink and pads (see the top).
    void on_grow();
    void on_room(const link_wire::header& h);
    void check_idle(std::uint64_t big_frames_before);
    void arm_idle_check();
    task<void> send_pads(std::uint32_t count);
    /// Whether a data frame would find a slot of the kind it takes now.
    bool data_slot_free() const noexcept {
        return growth_ == growth::grown ? !free_big_.empty() : !free_slots_.empty();
    }
    /// Wakes every wait_slot to look again (the kind of slot changed).
    void wake_slot_waiters();
    /// Counts a wait in `n` while it lasts, however it ends (resumed,
    /// thrown, or its coroutine destroyed).
    struct counted_wait {
        std::uint32_t& n;
        explicit counted_wait(std::uint32_t& count) noexcept : n(count) { ++n; }
        ~counted_wait() { --n; }
        counted_wait(const counted_wait&) = delete;
        counted_wait& operator=(const counted_wait&) = delete;
    };
    /// The inline bytes the peer's receives hold before they grow.
    std::size_t small_room() const noexcept { return std::min(eager_size_, small_payload); }
    std::byte* slot_data(std::size_t slot) const noexcept {
        return slot < small_slot_count_ ? small_slots_.data() + slot * small_slot_size_
                                        : big_slots_.data() + (slot - small_slot_count_) * big_slot_size_;
    }
    /// Posts a frame from slot `slot` (header already encoded, `length`
    /// bytes in all) without waiting for its completion; frees the slot then.
    void post_slot(std::size_t slot, std::size_t length);
    /// A frame's send, posted and not yet completed: the engine's operation
    /// with no coroutine awaiting it (on_done is frame_sent), reused from
    /// frame to frame, so a frame costs no coroutine frame, no spawn and
    /// no reference count.
    struct frame_send : operation_base {
        peer_link* link = nullptr;
        std::size_t send_slot = 0;  // the link's slot it carries
    };
    /// A frame_send's completion: frees its slot, and says so if the send
    /// failed (the connection broke).
    static void frame_sent(operation_base* op) noexcept;
    /// A free send slot (data and rts frames): waits while every slot holds
    /// a frame whose send has not completed yet. That happens on a lossy
    /// link: the peer's frames can return credit (it handled ours) before
    /// the RC acknowledgements that complete our sends arrive.
    task<std::size_t> wait_slot(std::stop_token token);
    std::size_t take_slot();
    std::size_t take_data_slot();
    /// Sends a control frame (fin, credit, ping, abort) now, or as soon as a
    /// slot frees (before any waiting data frame) when none is free; its
    /// `acked` is encoded when it is posted.
    void send_control(link_wire::header h, const std::string& payload = {});
    /// A slot's send completed: to a pending control frame, a waiting data
    /// frame, or the free list.
    void slot_done(std::size_t slot);
    [[noreturn]] void throw_owner_failure() const;
    /// A wait found the connection gone and nothing left: fails the owner
    /// naming this peer, and throws its error.
    [[noreturn]] void link_gone() const;
    /// The connection is gone (why): frames that arrived stay to be taken;
    /// waits that find nothing more end in link_gone.
    void connection_lost(const std::string& why);
    /// The same for sends (credits, slots, fins) only: the inbox stays open.
    void mark_lost(const std::string& why);
    /// A send failed (why): the connection is gone, but frames that arrived
    /// before may not have reached the inbox yet. Sends fail at once; the
    /// inbox closes once the dispatcher ends, or after lost_grace.
    void send_failed(const std::string& why);
    /// How long, after a failed send, frames may still come from the
    /// completion queue.
    static constexpr std::chrono::milliseconds lost_grace{1000};
    std::string describe(const link_wire::header& h) const;
    std::string describe(const expected_frame& e) const;
    std::string op_name(link_wire::op o) const;

    std::weak_ptr<link_owner> core_;
    std::string module_;             // "stream", "C API", ...
    std::string receive_call_;       // "stream receive"
    std::string send_call_;          // "stream send"
    std::shared_ptr<message_sink> sink_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    int rank_;
    std::string name_;
    cordma::connection conn_;
    receive_queue queue_;
    std::uint32_t own_window_;
    std::uint32_t peer_window_;
    std::size_t eager_size_;
    std::size_t receive_eager_;

    std::shared_ptr<memory_pool> pool_;
    std::shared_ptr<elastic_receives> receives_;
    // Send slots: small ones (control frames; data while not grown),
    // numbered first, and big ones while grown (data), numbered after.
    local_mr small_slots_;
    std::size_t small_slot_size_;
    std::size_t small_slot_count_;
    local_mr big_slots_;
    std::size_t big_slot_size_;
    std::size_t big_slot_count_;
    std::vector<std::size_t> free_slots_;               // small
    std::vector<std::size_t> free_big_;
    // The peer's receives as this side sends into them.
    enum class growth { small, asked, grown, refused };
    growth growth_ = growth::small;
    std::uint64_t next_frame_ = 1;   // this side's next frame on the connection (the hello was 0)
    std::size_t room_before_;        // the room of frames before room_switch_
    std::size_t room_after_;
    std::uint64_t room_switch_ = 0;
    std::uint64_t big_frames_ = 0;   // frames sent over the small room
    std::uint32_t senders_waiting_ = 0;
    std::uint32_t pads_sent_ = 0;
    std::shared_ptr<event_listener::timer> idle_timer_;
    std::shared_ptr<waiter_queue<bool>> room_answered_;  // wakes a make_room
    std::uint32_t room_waiters_ = 0;
    std::shared_ptr<waiter_queue<bool>> slot_freed_;   // wakes a wait_slot
    std::uint32_t slot_waiters_ = 0;
    struct pending_control {
        link_wire::header header;
        std::string payload;
    };
    std::deque<pending_control> pending_control_;      // waiting for a slot

    std::shared_ptr<waiter_queue<bool>> credits_;      // one per frame we may still send
    std::shared_ptr<waiter_queue<inbound_frame>> inbox_;
    std::shared_ptr<waiter_queue<link_wire::header>> fins_;
    std::uint32_t sent_ = 0;         // credit-counted frames sent
    std::uint32_t peer_acked_ = 0;   // of those, handled by the peer
    std::uint32_t handled_ = 0;      // the peer's credit-counted frames handled here
    std::uint32_t acked_sent_ = 0;   // the last `acked` this side sent
    std::shared_ptr<waiter_queue<bool>> idle_;
    std::size_t in_flight_ = 0;      // frames posted, not yet completed
    std::deque<frame_send> frame_sends_;  // every one made (addresses stay put)
    std::vector<frame_send*> idle_sends_;  // those not in flight
    std::shared_ptr<peer_link> self_while_sending_;  // while in_flight_ > 0
    bool drain_waiting_ = false;
    std::string gone_reason_;        // why the connection went, once it has
    bool lost_ = false;
    bool peer_reads_traces_ = false;  // its hello's hello_reads_traces
    // Frames from the peer, counted (not timed: a clock read per frame
    // cost a microsecond where the clock source is slow), and the count
    // when the outstanding ping went out: any frame since answers it.
    std::uint64_t frames_heard_ = 0;
    std::uint64_t heard_at_ping_ = 0;
    coarse_clock::time_point ping_sent_{};
    bool ping_outstanding_ = false;
    bool abort_sent_ = false;
    bool abort_received_ = false;
};

}  // namespace cordma::detail
