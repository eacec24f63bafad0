#pragma once
/// A group's point-to-point messages on the receiving side: the message
/// frames every link hands it (message_sink), matched against the recvs
/// waiting for them by source and tag, or kept until a recv asks; and the
/// fins that tell a sender its large message was read. Event listener
/// thread only.
///
/// Matching is MPI's: a frame goes to the oldest waiting recv it matches;
/// a recv takes the oldest kept frame it matches. Frames of one link arrive
/// in order, so messages from one source with one tag are taken in the
/// order they were sent.
///
/// A kept frame must not hold its link's credit for long: a collective
/// after it would wait behind a message nobody asked for yet. So a kept
/// rts gives its receive back at once (its header says all), and a kept
/// data frame is copied aside and gives its receive back, up to
/// `copy_budget` per source; beyond that it holds its receive, and the
/// sender runs out of credit (flow control, as MPI_Send may block).

#include <cstddef>
#include <cstdint>
#include <coroutine>
#include <deque>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <cordma/event_listener.hpp>
#include <cordma/task.hpp>

#include "link/peer_link.hpp"

namespace cordma::detail {

class group_core;

class mailbox : public message_sink, public std::enable_shared_from_this<mailbox> {
public:
    /// What a recv took.
    struct entry {
        enum class state : std::uint8_t {
            held,      ///< a data frame still in its receive: release() it once copied
            copied,    ///< a data frame copied into `bytes`, its receive given back
            announced, ///< an rts, its receive given back: fetch, then send_fin
        };
        int source = -1;
        state how = state::held;
        inbound_frame frame;
        std::vector<std::byte> bytes;
    };

    mailbox(std::weak_ptr<group_core> core, std::shared_ptr<event_listener> el, int size,
            std::uint32_t copy_budget);

    void arrived(peer_link& from, inbound_frame frame) override;
    void fin_arrived(peer_link& from, const link_wire::header& fin) override;
    void link_lost(peer_link& from, const std::string& why) override;

    /// The oldest message from `source` (-1: any) with `tag` (any_tag:
    /// any) of at most `room` bytes: kept already, or the next to arrive.
    /// Throws operation_cancelled if `token` stops first (nothing taken),
    /// group_error(message_size) for a longer one (it stays), the group's
    /// failure if it fails meanwhile or the source is gone.
    task<entry> take(int source, std::uint32_t tag, std::size_t room, std::stop_token token);

    /// A fin this rank will wait for: message `seq` to `dest`. Made before
    /// its rts is posted, so the fin cannot come first.
    struct fin_wait {
        int dest;
        std::uint32_t seq;
        std::coroutine_handle<> handle;
        bool done = false;
        bool cancelled = false;
        bool failed = false;
    };
    std::shared_ptr<fin_wait> expect_fin(int dest, std::uint32_t seq);
    /// Waits for it. Throws operation_cancelled if `token` stops first, the
    /// group's failure if it fails meanwhile.
    task<void> wait_fin(std::shared_ptr<fin_wait> w, std::stop_token token);
    /// The next message number to `dest` (1, 2, ...), for its fin.
    std::uint32_t next_seq(int dest) { return ++sent_seq_.at(static_cast<std::size_t>(dest)); }

    /// The group failed: every waiting recv and fin wakes and throws its
    /// failure; kept messages are dropped.
    void fail_all();

private:
    struct waiter {
        int source;
        std::uint32_t tag;
        std::size_t room;
        std::coroutine_handle<> handle;
        std::optional<entry> got;
        std::string refused;   // why it was woken without a message (too long)
        bool done = false;
        bool cancelled = false;
        bool failed = false;   // the group failed, or its source is gone
    };
    template <class W>
    struct wait_awaiter {
        W* w;
        bool await_ready() const noexcept { return w->done; }
        void await_suspend(std::coroutine_handle<> h) noexcept { w->handle = h; }
        void await_resume() const noexcept {}
    };
    // A function, not a braced temporary in co_await (g++ 12).
    template <class W>
    static wait_awaiter<W> wait_for(W* w) { return {w}; }

    static bool matches(int source, std::uint32_t tag, int from, std::uint32_t frame_tag) noexcept;
    /// Keeps a frame no recv waited for, giving back what it can (above).
    void keep(peer_link& from, inbound_frame frame);
    std::string too_long(const entry& e, std::size_t room) const;
    std::string describe_recv(int source, std::uint32_t tag) const;
    template <class W>
    static void wake(const std::shared_ptr<W>& w) {
        w->done = true;
        if (w->handle)
            w->handle.resume();
    }
    /// Breaks the group because `source` is gone and a wait needs it.
    void source_gone(int source);

    std::weak_ptr<group_core> core_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    std::uint32_t copy_budget_;
    std::deque<std::shared_ptr<waiter>> posted_;   // recvs waiting, oldest first
    std::deque<entry> kept_;                       // frames nobody asked for yet, oldest first
    std::vector<std::uint32_t> copied_;            // kept copies per source
    std::vector<std::string> gone_;                // why each source's link went ("" while there)
    std::vector<std::uint32_t> sent_seq_;          // message numbers sent per destination
    std::vector<std::shared_ptr<fin_wait>> fins_;
    bool failed_ = false;
};

}  // namespace cordma::detail
