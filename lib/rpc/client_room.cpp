// cordma::rpc::server, its clients' elastic receives (rpc_wire.hpp and
// docs/rpc.md, "Elastic receives"): a client's receives start small; a
// response that needs more room goes by rendezvous while the server asks
// the client to grow them (a grow frame, answered in the client's next
// done), and a second in which no frame needed the room makes them small
// again (a shrink frame, and pads that cycle the big receives out). An idle
// client pins a few KiB, a busy one its whole window.
#include "rpc/server_state.hpp"

namespace cordma::rpc::detail {

namespace {

/// How long a grown client's room may go unused before it shrinks.
constexpr std::chrono::seconds room_idle{1};

/// The most receives a client may say it posts (its receive queue's depth
/// is at most this on every device cordma knows).
constexpr std::uint64_t max_client_receives = 1 << 16;

}  // namespace

void server_state::set_room(session& s, std::uint64_t from, std::size_t size) noexcept {
    // Frames before `from` keep the rule so far; with the last switch not
    // reached yet, the smaller of its two rooms (safe either way).
    if (s.frames_sent >= s.room_switch)
        s.room_before = s.room_after;
    else
        s.room_before = std::min(s.room_before, s.room_after);
    s.room_switch = from;
    s.room_after = size;
}

void server_state::send_header_frame(const std::shared_ptr<session>& s, wire::frame type) {
    wire::header h;
    h.type = type;
    // Posted before this returns (send_frame numbers it at once), so frames
    // sent after this call land after it.
    spawn_detached(send_frame(s, h, {}), [](std::exception_ptr) {});
}

void server_state::ask_room(const std::shared_ptr<session>& s, std::size_t bytes) {
    if (s->room_big == 0 || s->room_state != session::growth::small || bytes > s->room_big || s->gone)
        return;
    s->room_state = session::growth::asked;
    send_header_frame(s, wire::frame::grow);
}

bool server_state::take_room(const std::shared_ptr<session>& s, const wire::header& h, std::string& why) {
    if (s->room_state != session::growth::asked) {
        why = "a done frame answering a grow the server did not send";
        return false;
    }
    if (h.size != s->room_small && h.size != s->room_big) {
        why = "a room of " + std::to_string(h.size) + " bytes, neither its hello's " + std::to_string(s->room_small) +
              " nor " + std::to_string(s->room_big);
        return false;
    }
    if (h.code == 0 || h.code > max_client_receives || h.addr > s->frames_sent + h.code) {
        why = "room from its receive " + std::to_string(h.addr) + " of " + std::to_string(h.code) +
              ", more than its receives ahead of the server's frame " + std::to_string(s->frames_sent);
        return false;
    }
    s->client_receives = h.code;
    if (h.size == s->room_small) {
        s->room_state = session::growth::refused;  // it had no memory: responses go by rendezvous
        return true;
    }
    set_room(*s, h.addr, h.size);
    s->room_state = session::growth::grown;
    s->big_frames_seen = s->big_frames;
    ++grown_clients_;
    if (!room_timer_)
        arm_room_timer();
    return true;
}

void server_state::check_rooms() {
    room_timer_.reset();
    if (shut_)
        return;
    for (auto& [qp, s] : sessions_) {
        if (s->room_state != session::growth::grown)
            continue;
        if (s->big_frames != s->big_frames_seen) {
            s->big_frames_seen = s->big_frames;
            continue;
        }
        // No frame needed the room for a whole look: small again from the
        // next frame on; the shrink says so, and a pad per receive cycles
        // the client's big receives out (they are posted: only frames
        // free them).
        s->room_state = session::growth::small;
        --grown_clients_;
        set_room(*s, s->frames_sent, s->room_small);
        send_header_frame(s, wire::frame::shrink);
        for (std::uint32_t i = 0; i < s->client_receives; ++i)
            send_header_frame(s, wire::frame::pad);
    }
    if (grown_clients_ > 0)
        arm_room_timer();
}

void server_state::arm_room_timer() {
    std::weak_ptr<server_state> weak = weak_from_this();
    room_timer_ = event_listener_->call_after(room_idle, [weak] {
        if (auto self = weak.lock())
            self->check_rooms();
    });
}

}  // namespace cordma::rpc::detail
