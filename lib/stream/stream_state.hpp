#pragma once
/// What a cordma::stream is: one connection, one link (lib/link) over it,
/// and where reading stands in the frame being read. Owns the link (a
/// link_owner: a failure ends this stream alone). Event listener thread
/// only; the public methods hop there first.

#include <atomic>
#include <coroutine>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/stream.hpp>
#include <cordma/task.hpp>

#include "core/coarse_clock.hpp"
#include "engine/pending_source.hpp"
#include "engine/waiter_queue.hpp"
#include "core/trace_span.hpp"
#include "link/peer_link.hpp"
#include "stream/stream_tally.hpp"

namespace cordma::detail {

class stream_state : public link_owner, public std::enable_shared_from_this<stream_state> {
public:
    stream_state(builder b, stream_options options, cordma::connection conn);

    void fail(std::errc code, const std::string& why, int rank_at_fault, bool tell_peers) override;
    bool failed() const noexcept override { return failure_.has_value(); }
    [[noreturn]] void throw_failure() const override;
    const char* module_name() const noexcept override { return "stream"; }

    task<std::size_t> read(std::span<std::byte> buffer, std::stop_token token);
    task<void> write(std::span<const std::byte> bytes, local_slice registered, std::stop_token token);
    task<void> shutdown_write(std::stop_token token);
    task<void> close();

    const std::string& peer() const noexcept { return peer_; }
    const cordma::connection& connection() const noexcept { return conn_; }
    /// Holds the link, then starts it: a frame already waiting may fail
    /// this stream at once, and fail() must find the link to close.
    void set_link(std::shared_ptr<peer_link> l) {
        link_ = std::move(l);
        link_->start();
    }
    const stream_options& options() const noexcept { return options_; }
    stream_statistics statistics() const noexcept { return tally_.read(); }
    /// stream::set_trace and its readers (between writes and reads: the
    /// caller's hop to the event listener orders them).
    void set_trace(const trace_id& t) noexcept { trace_ = t; }
    trace_id trace() const noexcept { return trace_; }
    trace_id peer_trace() const noexcept { return peer_trace_; }

    /// Frames a large write is cut into: bounds what one registration pins.
    static constexpr std::size_t largest_frame = std::size_t(16) << 20;

private:
    /// `co_await on_listener()` moves the calling coroutine to the event
    /// listener thread: at once, with no frame and no hop, when it is
    /// there already (as a stream's reads and writes nearly always are).
    struct listener_awaiter {
        cordma::event_listener* el;
        bool await_ready() const noexcept { return el->running_in_this_thread(); }
        void await_suspend(std::coroutine_handle<> h) { el->post([h] { h.resume(); }); }
        void await_resume() const noexcept {}
    };
    listener_awaiter on_listener() const noexcept { return {event_listener_.get()}; }
    /// Pings the peer while a read or write waits (keepalive_scope).
    friend struct keepalive_scope;
    void keepalive_start();
    void keepalive_stop();
    void tick();
    [[noreturn]] void throw_closed(const char* call) const;
    /// Sends the end of stream (once: write_shut_ is set first).
    task<void> send_end(std::stop_token token);
    /// The header of the next data frame (its sequence number taken).
    link_wire::header data_header() noexcept;
    task<void> write_frame(std::span<const std::byte> bytes, local_slice registered, std::stop_token token);
    /// Sends the batch as frames as credit returns, until it is empty
    /// (spawned when the first bytes go into it).
    task<void> flush();
    /// Waits until the flusher has sent a frame or stopped; throws the
    /// stream's failure, or operation_cancelled if `token` stops first.
    task<void> wait_flushed(std::stop_token token);
    bool batch_waiting() const noexcept { return flushing_ || !batch_.empty(); }

    cordma::builder builder_;
    stream_options options_;
    cordma::connection conn_;
    std::string peer_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    std::shared_ptr<peer_link> link_;

    std::optional<inbound_frame> current_;  // the frame being read
    std::uint64_t consumed_ = 0;            // of it
    bool eof_ = false;                      // the peer's end of stream was read
    bool write_shut_ = false;
    bool closed_ = false;
    bool closing_ = false;                  // close() runs: the caller is done with the peer
    bool reading_ = false;
    bool writing_ = false;
    std::uint32_t next_seq_ = 0;
    // Small writes made while no frame may go (the window is full) are
    // gathered here, up to one frame, and sent as one frame as soon as
    // credit returns; the write returns once its bytes are in.
    std::vector<std::byte> batch_;
    trace_id batch_trace_;  // the trace its bytes were written under (one per frame)
    bool flushing_ = false;
    std::shared_ptr<waiter_queue<bool>> flushed_;
    int flush_waiters_ = 0;
    std::optional<std::pair<std::errc, std::string>> failure_;
    stream_tally tally_;  // statistics(), and the process's cordma_stream_* sums
    const std::uint64_t* turn_ms_ = nullptr;  // its loop's turn time, coarse ms
    std::uint32_t qp_num_ = 0;                // its connection's, for a stuck report
    std::uint64_t read_began_ms_ = 0;         // the read in progress began
    std::uint64_t write_began_ms_ = 0;        // the write in progress began
    std::size_t read_size_ = 0;
    std::size_t write_size_ = 0;
    trace_id trace_;        // set_trace: the writes' frames carry it
    trace_id write_trace_;  // ... the write in progress's
    trace_id peer_trace_;   // the frame the last read took bytes from
    /// The read and write in progress, for a stuck report (pending_source.hpp).
    static void collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);

    int waiting_ = 0;
    std::shared_ptr<event_listener::timer> tick_;
    coarse_clock::time_point last_tick_{};
    // Last: leaves the stuck reports before anything it reads goes.
    std::optional<pending_source_registration> pending_source_;
};

/// The stream's hello on a new connection, then its state and link.
/// `accepting`: this side accepted the connection (it answers the hello).
task<std::shared_ptr<stream_state>> open_stream(builder b, stream_options options, cordma::connection conn,
                                                std::stop_token token, bool accepting);

/// stream_options out of range: std::invalid_argument naming the field.
void check_stream_options(const stream_options& o, const char* call);

}  // namespace cordma::detail
