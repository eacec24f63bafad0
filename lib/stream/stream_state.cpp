// A stream's reads, writes and ends over its link (stream_state.hpp).
#include "stream/stream_state.hpp"
#include "connect/registration_pds.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task_group.hpp>

#include "link/link_hello.hpp"
#include "link/link_wire.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace wire = link_wire;

namespace {

constexpr std::chrono::milliseconds tick_interval{500};
constexpr std::uint32_t data_frame = 0;
constexpr std::uint32_t end_frame = 1;

}  // namespace

/// While alive, the stream pings its peer every tick (a read or write is
/// waiting on it).
struct keepalive_scope {
    stream_state* s;
    explicit keepalive_scope(stream_state* st) : s(st) { s->keepalive_start(); }
    ~keepalive_scope() { s->keepalive_stop(); }
    keepalive_scope(const keepalive_scope&) = delete;
    keepalive_scope& operator=(const keepalive_scope&) = delete;
};

void check_stream_options(const stream_options& o, const char* call) {
    auto bad = [call](const std::string& what) {
        throw std::invalid_argument(std::string(call) + ": stream_options::" + what);
    };
    if (o.inline_size < smallest_inline || o.inline_size > largest_inline)
        bad("inline_size is " + std::to_string(o.inline_size) + " bytes; it must be 64 B to 1 MiB");
    if (o.window < 2 || o.window > 60)
        bad("window is " + std::to_string(o.window) + "; it must be 2 to 60");
    if (o.register_size == 0)
        bad("register_size is 0; it must be positive (a size from which writes register the caller's memory)");
    if (o.peer_timeout < std::chrono::seconds(1))
        bad("peer_timeout is " + std::to_string(o.peer_timeout.count()) + " ms; it must be at least 1 s");
}

stream_state::stream_state(cordma::builder b, stream_options options, cordma::connection conn)
    : builder_(std::move(b)),
      options_(options),
      conn_(std::move(conn)),
      peer_(conn_.peer()),
      event_listener_(conn_.event_listener()),
      flushed_(waiter_queue<bool>::make(event_listener_)) {
    turn_ms_ = event_listener_access::turn_ms(*event_listener_);
    qp_num_ = conn_.qp()->qp_num();
    pending_source_.emplace(event_listener_, &stream_state::collect_pending, this);
}

void stream_state::collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out) {
    // On the loop's thread, between its turns: a read or write in progress
    // is one suspended, waiting.
    const auto* s = static_cast<const stream_state*>(self);
    auto add = [&](pending_stage stage, std::uint64_t since_ms, std::size_t bytes, const char* what) {
        pending_operation p;
        p.peer = s->peer_;
        p.qp_num = s->qp_num_;
        p.role = "data";
        p.stage = stage;
        p.age = age_of(now_ms, since_ms);
        p.bytes = bytes;
        p.what = what;
        return &out.emplace_back(std::move(p));
    };
    if (s->reading_)
        add(pending_stage::stream_read, s->read_began_ms_, s->read_size_, "stream read");
    if (s->writing_)
        add(pending_stage::stream_write, s->write_began_ms_, s->write_size_, "stream write")->trace = s->write_trace_;
}

void stream_state::fail(std::errc code, const std::string& why, int, bool tell_peers) {
    if (failure_)
        return;
    // One line per stream that fails (a peer that broke the protocol, sent
    // an abort, or went away mid-stream): a server has no other trace of it.
    // Not a warning once this side is closing (close() finds the link gone
    // as it sends its end of stream or waits for it to leave): the caller
    // wants nothing more of the peer, and a peer that disconnects first is
    // the normal end of the classic exchange (a client reads its reply and
    // closes at once). Debug when this side read the peer's end of stream
    // (it closed cleanly); info when it went without one.
    log_level level = log_level::warning;
    if (closing_ && eof_)
        level = log_level::debug;
    else if (closing_ && code == std::errc::connection_aborted)
        level = log_level::info;
    detail::logf(level, "cordma::stream to %s: %s; closing it", peer_.c_str(), why.c_str());
    failure_.emplace(code, why);
    flushed_->close();
    if (!link_)
        return;
    if (tell_peers && !link_->lost())
        link_->send_abort(0xffffffffu, why);
    link_->close_queues();
    if (closed_)
        return;
    closed_ = true;
    // The connection goes once the abort has left (2 s at most). The frame
    // being read stays until the state goes: a read may still be inside it.
    link_->close_soon();
}

void stream_state::throw_failure() const {
    if (failure_)
        throw std::system_error(std::make_error_code(failure_->first), "cordma::stream to " + peer_ + ": " + failure_->second);
    throw std::system_error(std::make_error_code(std::errc::not_connected), "cordma::stream to " + peer_ + ": closed");
}

void stream_state::throw_closed(const char* call) const {
    if (failure_)
        throw_failure();
    throw std::logic_error(std::string("cordma::stream::") + call + " to " + peer_ + " after close()");
}

void stream_state::keepalive_start() {
    if (waiting_++ > 0 || tick_)
        return;
    last_tick_ = coarse_clock::now();
    std::weak_ptr<stream_state> weak = shared_from_this();
    tick_ = event_listener_->call_after(tick_interval, [weak] {
        if (auto s = weak.lock())
            s->tick();
    });
}

void stream_state::keepalive_stop() { --waiting_; }

void stream_state::tick() {
    tick_.reset();
    if (waiting_ <= 0 || !link_ || failure_)
        return;
    auto now = coarse_clock::now();
    if (now - last_tick_ > 3 * tick_interval)
        link_->excuse_silence(now);  // this process was starved, not the peer silent
    last_tick_ = now;
    link_->probe(now, options_.peer_timeout);
    std::weak_ptr<stream_state> weak = shared_from_this();
    tick_ = event_listener_->call_after(tick_interval, [weak] {
        if (auto s = weak.lock())
            s->tick();
    });
}

task<std::size_t> stream_state::read(std::span<std::byte> buffer, std::stop_token token) {
    auto self = shared_from_this();
    co_await on_listener();
    if (reading_)
        throw std::logic_error("cordma::stream::read to " + peer_ + ": another read is running (one at a time)");
    if (eof_ || buffer.empty())
        co_return 0;
    if (closed_)
        throw_closed("read");
    reading_ = true;
    read_began_ms_ = *turn_ms_;
    read_size_ = buffer.size();
    std::exception_ptr error;
    std::size_t n = 0;
    try {
        if (!current_) {
            std::optional<inbound_frame> got = link_->try_take_any();
            if (!got) {
                keepalive_scope alive(this);
                auto link = link_;  // the pop names it if cancelled: kept while it waits
                got = co_await link->take_any(token);
            }
            if (!got)
                link_->throw_gone();
            inbound_frame& f = *got;
            consumed_ = 0;
            if (f.header.op != wire::op::stream) {
                std::string why = "sent a frame of op " + wire::name(f.header.op) + ", not a stream's";
                fail(std::errc::protocol_error, why, 0, true);
                throw_failure();
            }
            current_.emplace(std::move(f));
            if (current_->header.extra == data_frame)
                tally_.frames_received.add();
        }
        inbound_frame& f = *current_;
        if (f.header.extra == end_frame) {
            eof_ = true;
            link_->finish(f);
            current_.reset();
        } else {
            n = static_cast<std::size_t>(std::min<std::uint64_t>(f.header.size - consumed_, buffer.size()));
            peer_trace_ = f.header.trace;
            if (f.header.type == wire::frame::data) {
                std::memcpy(buffer.data(), wire::payload(f.message.bytes(), f.header).data() + consumed_, n);
            } else if (n >= options_.register_size) {
                local_slice into = builder_.local_registration(buffer.first(n));
                co_await link_->fetch(f, consumed_, into);
            } else {
                local_mr staging = builder_.pool()->allocate(n);
                local_slice into = staging.all();
                co_await link_->fetch(f, consumed_, into);
                std::memcpy(buffer.data(), staging.data(), n);
            }
            consumed_ += n;
            if (consumed_ == f.header.size) {
                link_->finish(f);
                current_.reset();
            }
        }
    } catch (const operation_cancelled&) {
        error = std::make_exception_ptr(operation_cancelled(
            "cordma::stream::read", peer_, "nothing is lost: the next read goes on where this one would have"));
    } catch (...) {
        error = std::current_exception();
    }
    reading_ = false;
    if (error)
        std::rethrow_exception(error);
    tally_.bytes_read.add(n);
    co_return n;
}

wire::header stream_state::data_header() noexcept {
    wire::header h;
    h.op = wire::op::stream;
    h.extra = data_frame;
    h.seq = ++next_seq_;
    h.trace = write_trace_;
    return h;
}

task<void> stream_state::write_frame(std::span<const std::byte> bytes, local_slice registered,
                                     std::stop_token token) {
    wire::header h = data_header();
    keepalive_scope alive(this);
    tally_.frames_sent.add();
    if (bytes.size() <= link_->inline_room()) {
        co_await link_->send_inline(h, bytes, token);
    } else if (registered.block()) {
        co_await link_->send(h, registered, token);
    } else {
        // From register_size up (write() sends smaller ones inline).
        // On every rail of the builder when it is large enough to stripe,
        // so the reader's RDMA READ is striped over them.
        local_mr source = register_local_mr(cordma::detail::registration_pds(builder_, bytes.size()),
                                            const_cast<std::byte*>(bytes.data()), bytes.size(),
                                            access_flags::remote_read);
        local_slice from = source.all();
        co_await link_->send(h, from, token);
    }
}

task<void> stream_state::write(std::span<const std::byte> bytes, local_slice registered, std::stop_token token) {
    auto self = shared_from_this();
    co_await on_listener();
    if (writing_)
        throw std::logic_error("cordma::stream::write to " + peer_ + ": another write is running (one at a time)");
    if (closed_ || write_shut_) {
        if (failure_)
            throw_failure();
        throw std::logic_error("cordma::stream::write to " + peer_ + " after " +
                               (closed_ ? "close()" : "shutdown_write()"));
    }
    if (failure_)
        throw_failure();
    writing_ = true;
    write_began_ms_ = *turn_ms_;
    write_size_ = bytes.size();
    write_trace_ = trace_;
    traced_span span;
    if (!write_trace_.empty())
        span.open(span_info{span_kind::stream_write, write_trace_, 0, "stream write", peer_, 0, bytes.size()});
    bool stalled = false;  // waited for the reader's window at least once
    std::exception_ptr error;
    try {
        // Below register_size (and from unregistered memory) bytes go as
        // inline frames, copied into the reader's receives: like a TCP
        // socket buffer, a window of them (and one batch) is taken without
        // the reader, so a protocol that writes a request and only then
        // reads cannot deadlock on a medium-sized write. While no frame
        // may go, small writes gather in the batch, sent as one frame when
        // credit returns. From register_size up (or from registered memory)
        // bytes go zero-copy, read by the reader, after the batch.
        std::size_t offset = 0;
        while (offset < bytes.size()) {
            if (failure_)
                throw_failure();
            std::size_t left = bytes.size() - offset;
            bool copied = !registered.block() && left < options_.register_size;
            if (copied && link_->needs_room(std::min(batch_.size() + left, link_->eager_size())))
                co_await link_->make_room(std::min(batch_.size() + left, link_->eager_size()), token);
            if (copied && !batch_waiting() && link_->can_send_now()) {
                // A credit and a slot are free: the frame goes now, with
                // no wait (and so no coroutine frame for one).
                std::size_t n = std::min(left, link_->inline_room());
                link_->send_inline_now(data_header(), bytes.subspan(offset, n));
                tally_.frames_sent.add();
                offset += n;
            } else if (copied && batch_.size() < link_->inline_room() &&
                       (batch_.empty() || batch_trace_ == write_trace_)) {
                // (Bytes of another trace wait for the batch to go: a
                // frame carries one.)
                std::size_t n = std::min(left, link_->inline_room() - batch_.size());
                if (batch_.empty())
                    batch_trace_ = write_trace_;
                batch_.insert(batch_.end(), bytes.begin() + offset, bytes.begin() + offset + n);
                offset += n;
                if (!flushing_) {
                    flushing_ = true;
                    spawn_detached(flush(), [](std::exception_ptr) {});
                }
            } else if (batch_waiting()) {
                stalled = true;
                co_await wait_flushed(token);  // the batch is full, or must go before a zero-copy frame
            } else {
                std::size_t n = std::min(left, largest_frame);
                local_slice part = registered.block() ? registered.slice(offset, n) : local_slice{};
                stalled = stalled || !link_->can_send_now();  // its frame waits for a credit or a slot
                co_await write_frame(bytes.subspan(offset, n), part, token);
                offset += n;
            }
        }
    } catch (const operation_cancelled&) {
        error = std::make_exception_ptr(operation_cancelled(
            "cordma::stream::write", peer_,
            "part of the buffer may have gone (whole frames sent before, and bytes gathered into the batch)"));
    } catch (...) {
        error = std::current_exception();
    }
    writing_ = false;
    if (span.is_open()) {
        std::error_code outcome;
        if (error) {
            try {
                std::rethrow_exception(error);
            } catch (const std::system_error& e) {
                outcome = e.code();
            } catch (...) {
                outcome = std::make_error_code(std::errc::io_error);
            }
        }
        span.close(span_info{span_kind::stream_write, write_trace_, 0, "stream write", peer_, 0, bytes.size()},
                   outcome);
    }
    if (stalled)
        tally_.credit_stalls.add();
    if (error)
        std::rethrow_exception(error);
    tally_.bytes_written.add(bytes.size());
}

task<void> stream_state::flush() {
    auto self = shared_from_this();
    keepalive_scope alive(this);
    try {
        while (!batch_.empty() && !failure_) {
            std::stop_token none;
            std::size_t slot = co_await link_->credit_and_slot(none);
            wire::header h;
            h.op = wire::op::stream;
            h.extra = data_frame;
            h.seq = ++next_seq_;
            h.trace = batch_trace_;
            std::span<const std::byte> frame(batch_.data(), batch_.size());
            link_->post_inline(slot, h, frame);
            tally_.frames_sent.add();
            batch_.clear();
            if (flush_waiters_ > 0)
                flushed_->push(true);
        }
    } catch (const std::exception&) {
        // The link failed (and failed this stream): the waiters wake on
        // flushed_, closed by fail().
    }
    flushing_ = false;
    for (int n = flush_waiters_; n > 0; --n)
        flushed_->push(true);
}

task<void> stream_state::wait_flushed(std::stop_token token) {
    ++flush_waiters_;
    std::optional<bool> woken;
    std::exception_ptr error;
    try {
        woken = co_await flushed_->pop(token, "cordma::stream::write", peer_);
    } catch (...) {
        error = std::current_exception();
    }
    --flush_waiters_;
    if (error)
        std::rethrow_exception(error);
    if (!woken || failure_)
        throw_failure();
}

task<void> stream_state::shutdown_write(std::stop_token token) {
    auto self = shared_from_this();
    co_await on_listener();
    if (write_shut_ || closed_)
        co_return;
    if (failure_)
        throw_failure();
    keepalive_scope alive(this);
    bool cancelled = false;
    try {
        while (batch_waiting())
            co_await wait_flushed(token);
        co_await send_end(token);
    } catch (const operation_cancelled&) {
        cancelled = true;
    }
    if (cancelled) {
        // The end frame never got its credit: nothing went, so writing is
        // open again and a later shutdown_write or close sends it.
        write_shut_ = false;
        throw operation_cancelled("cordma::stream::shutdown_write", peer_,
                                  "the end of stream was not sent (a later shutdown_write or close sends it)");
    }
}

task<void> stream_state::send_end(std::stop_token token) {
    write_shut_ = true;
    wire::header h;
    h.op = wire::op::stream;
    h.extra = end_frame;
    h.seq = ++next_seq_;
    std::span<const std::byte> none;
    co_await link_->send_inline(h, none, token);
}

task<void> stream_state::close() {
    auto self = shared_from_this();
    co_await on_listener();
    if (closed_ || closing_)
        co_return;
    closing_ = true;
    // Bounded: a peer that stops reading cannot hold close() forever.
    std::stop_source stop;
    auto timer = event_listener_->call_after(options_.peer_timeout, [stop]() mutable { stop.request_stop(); });
    std::stop_token token = stop.get_token();
    // A peer already gone gets no end of stream (sending it would only
    // find the link gone, and fail the stream to say so).
    if (!failure_ && !write_shut_ && !link_->lost()) {
        try {
            while (batch_waiting())
                co_await wait_flushed(token);
            co_await send_end(token);
        } catch (const std::exception&) {
            // The peer is gone or not reading: close anyway.
        }
    }
    if (!failure_ && !link_->lost()) {
        try {
            co_await link_->drain(token);
        } catch (const std::exception&) {
        }
    }
    timer->cancel();
    closed_ = true;
    current_.reset();
    link_->close_queues();
    co_await conn_.close();
}

task<std::shared_ptr<stream_state>> open_stream(cordma::builder b, stream_options options, cordma::connection conn,
                                                std::stop_token token, bool accepting) {
    auto state = std::make_shared<stream_state>(b, options, conn);
    auto pool = b.pool();
    link_terms mine{options.window, options.inline_size};
    receive_queue queue(conn, peer_link::receive_count(mine.window), peer_link::first_frame_size(mine.inline_size), pool);
    link_terms theirs = co_await exchange_hello(conn, &queue, pool, stream_hello_mark, mine,
                                                b.settings().connect_timeout, token, accepting);
    state->set_link(open_link(state, 0, "stream peer " + conn.peer(), conn, std::move(queue), pool, mine, theirs));
    co_return state;
}

}  // namespace cordma::detail
