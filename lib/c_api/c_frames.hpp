#pragma once
/// What every C call moves: one frame to or from one peer over its link,
/// from or into the caller's own (unregistered) memory. Small payloads are
/// copied into the link's slots; larger ones are registered for the
/// transfer and read by the receiver straight from the sender's memory.
/// A frame that does not fit the call taking it (another kind, a size
/// over the buffer) is held for the next call: nothing is lost.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <utility>
#include <vector>

#include <cordma/access.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/protection_domain.hpp>
#include <cordma/task.hpp>

#include "c_api/c_context.hpp"
#include "link/link_wire.hpp"

namespace cordma::detail::c_api {

/// A caller's buffer, registered when a transfer first needs it: the
/// whole buffer (collectives, which use many slices of it) or just the
/// range a message needs (send and recv).
class user_buffer {
public:
    /// Registered through `b`: a target of this side's own reads or
    /// receives (local_write) through its cache of registrations
    /// (builder::local_registration); anything else (a source, a peer's
    /// reads) for this call only.
    user_buffer(cordma::builder& b, const void* data, std::size_t size, access_flags access, bool register_whole)
        : builder_(&b), data_(static_cast<std::byte*>(const_cast<void*>(data))), size_(size), access_(access),
          whole_(register_whole) {}

    std::byte* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    /// [offset, offset + length) as registered memory.
    local_slice registered(std::size_t offset, std::size_t length);

private:
    local_slice register_range(std::size_t offset, std::size_t length);

    cordma::builder* builder_;
    std::byte* data_;
    std::size_t size_;
    access_flags access_;
    bool whole_;
    std::vector<local_slice> registrations_;
};

/// The C API's own ops, in the range the link leaves to its owner
/// (link_wire::module_op); a message is the link's op `message`. Numbered
/// as cordma::group numbers its collectives of the same name, so a capture
/// of either reads alike.
inline constexpr link_wire::op barrier_op = link_wire::module_op(1);
inline constexpr link_wire::op all_to_all_op = link_wire::module_op(3);
inline constexpr link_wire::op all_gather_op = link_wire::module_op(4);

/// What a frame is for: the operation and its round (`extra`).
struct frame_kind {
    link_wire::op op = link_wire::op::message;
    std::uint32_t extra = 0;
};

/// "a message (cordma_send)", "its cordma_alltoall", ...
std::string describe_kind(frame_kind kind);

/// The header of this side's next frame of `kind` to `p` (its seq counted).
link_wire::header next_header(peer_state& p, frame_kind kind) noexcept;

/// Sends buf[offset, offset + length) to `p` as a frame of `kind`. A
/// deadline that stops it after the frame left fails the peer (out of step).
task<void> send_frame(std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* buf, std::size_t offset,
                      std::size_t length, std::stop_token token, const char* call);

/// Takes `p`'s next frame, which must be of `kind`, into buf[offset, ...):
/// at most `max_len` bytes, or exactly `max_len` if `exact`. Returns its
/// size. A frame of another kind (EPROTO) or too large (EMSGSIZE, or
/// EPROTO if `exact`) is held for the next call.
task<std::size_t> take_frame(std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* buf, std::size_t offset,
                             std::size_t max_len, bool exact, std::stop_token token, const char* call);

/// Throws c_failure if `f` is not a frame of `kind` that fits `max_len`
/// (exactly, if `exact`), holding `f` for the next call (see take_frame).
void check_frame(peer_state& p, inbound_frame& f, frame_kind kind, std::size_t max_len, bool exact, const char* call);

/// `p`'s frame waiting to be taken (held, or arrived), if there is one,
/// with no coroutine: the fast path of a receive. Event listener thread.
std::optional<inbound_frame> waiting_frame(peer_state& p);

/// Lands a checked frame at `into` and finishes it when its bytes came
/// with it (a data frame): its size. An rts frame, whose bytes must be
/// read, is held (nothing is returned) for a task to take and fetch.
std::optional<std::size_t> land_now(peer_state& p, inbound_frame& f, std::byte* into);

/// `p`'s next frame's kind and size, without taking it (it is held).
task<std::pair<frame_kind, std::size_t>> peek_frame(std::shared_ptr<peer_state> p, std::stop_token token);

/// errno and message for a failure.
std::pair<int, std::string> classify(std::exception_ptr error) noexcept;

/// Runs `work(peer)` for every peer, all at once (concurrently) or one
/// after another, and collects the failures; then throws one c_failure
/// naming every peer that failed (errno of the first), or rethrows a
/// cancellation (the call's deadline) as it is.
task<void> for_each_peer(std::vector<std::shared_ptr<peer_state>> peers, bool concurrently,
                         std::function<task<void>(std::shared_ptr<peer_state>)> work);

}  // namespace cordma::detail::c_api
