#pragma once
/// The hello two processes exchange on a new connection before a link runs
/// on it (C API peers, streams; a module may send its own instead): each
/// side's window and inline size, under a mark that says which module
/// speaks, so a C API peer never takes a stream (or another module's peer)
/// for one of its own. The connection's receives must be posted (the queue) before
/// the hello goes out, so the peer's hello finds one.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stop_token>

#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task.hpp>

#include "link/peer_link.hpp"

namespace cordma::detail {

/// The marks, in the hello's `size` field: an ASCII name and a version.
inline constexpr std::uint64_t c_api_hello_mark = 0x4341504900000001ull;  // "CAPI", 1
inline constexpr std::uint64_t stream_hello_mark = 0x5354524d00000001ull; // "STRM", 1

/// The inline sizes a link takes (a side's receives hold one frame each).
inline constexpr std::size_t smallest_inline = 64;
inline constexpr std::size_t largest_inline = std::size_t(1) << 20;
/// The largest window a hello may offer: what stream_options and the C
/// API's configuration allow. The peer's window and inline size size this
/// side's send slots (peer_link::slot_count x frame_size), so a larger one
/// would let a peer make this side register up to 8 GiB.
inline constexpr std::uint32_t largest_peer_window = 60;

/// What one side's hello says.
struct link_terms {
    std::uint32_t window = 0;      // credit-counted frames the sender may receive in flight
    std::size_t inline_size = 0;   // the largest inline payload its receives hold
    bool reads_traces = true;      // it takes traced frames (its hello says so)
};

/// Sends `mine` and takes the peer's hello from `queue` within `timeout`;
/// throws std::system_error (protocol_error) saying what is wrong with it
/// (another module's mark, a window or size out of range). The accepting
/// side (`accepting`) takes the peer's hello first and then answers: the
/// connecting side posts its receives before it sends, so the answer
/// always finds one. Sent at once, it could arrive while the connecting
/// side is still connecting the agent's control QP (connect() returns only
/// then), and under load that outlasted the receiver-not-ready retries
/// (builder::rnr_retry, 6 x 655 ms): the client was refused.
task<link_terms> exchange_hello(cordma::connection conn, receive_queue* queue, std::shared_ptr<memory_pool> pool,
                                std::uint64_t mark, link_terms mine, std::chrono::milliseconds timeout,
                                std::stop_token token, bool accepting);

/// The link both hellos describe: receives from `queue` (already sized for
/// mine: receive_count(mine.window) of first_frame_size(mine.inline_size),
/// grown later on the peer's request), send
/// slots for the peer's window and size. Not started: the owner stores it
/// where its fail() finds it first, then calls start(). The peer's first
/// frames may already be waiting, and start() handles them at once: a
/// protocol error among them must find the link to close (a link started
/// before its owner held it stayed open, its peer waiting on a dead
/// connection).
std::shared_ptr<peer_link> open_link(std::weak_ptr<link_owner> owner, int rank, std::string name,
                                     cordma::connection conn, receive_queue queue, std::shared_ptr<memory_pool> pool,
                                     link_terms mine, link_terms theirs);

}  // namespace cordma::detail
