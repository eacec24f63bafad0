// receive_queue: the public handle (arguments checked here, the receives
// posted by its state on the event listener thread), the next() awaitable,
// and received_message. The state is in receive_queue_state.cpp.
#include <cordma/receive_queue.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/connection_state.hpp"
#include "engine/receive_queue_state.hpp"
#include "engine/run_and_wait.hpp"
#include "log/logf.hpp"

namespace cordma {

namespace {

constexpr std::chrono::nanoseconds no_timeout{-1};

void check_connection(const cordma::connection& conn) {
    if (!conn)
        throw std::logic_error(
            "receive_queue: an empty connection (default-constructed or moved from); get one from "
            "builder::connect, listener::accept or connect_loopback");
    if (conn.qp()->srq() != nullptr)
        throw std::logic_error("receive_queue on the connection to " + conn.peer() +
                               ": the connection receives through a shared_receive_queue (builder::shared_receives), "
                               "which takes every incoming message; await shared_receive_queue::next() instead");
}

}  // namespace

receive_queue::receive_queue(cordma::connection conn, std::size_t count, std::size_t buffer_size,
                             std::shared_ptr<memory_pool> pool)
    : connection_(std::move(conn)) {
    check_connection(connection_);
    const std::string call = "receive_queue(count=" + std::to_string(count) +
                             ", buffer_size=" + std::to_string(buffer_size) + ") on the connection to " +
                             connection_.peer();
    std::size_t depth = connection_.qp()->capacity().max_recv_wr;
    if (count == 0 || buffer_size == 0)
        throw std::invalid_argument(call + ": count and buffer_size must both be at least 1");
    if (count > depth)
        throw std::invalid_argument(call + ": the connection's receive queue has only " + std::to_string(depth) +
                                    " entries; use fewer buffers, or a deeper receive queue "
                                    "(builder::recv_queue_depth)");
    // Each buffer starts on a cache line; all of them in one registration.
    std::size_t stride = (buffer_size + 63) / 64 * 64;
    if (stride < buffer_size || stride > std::numeric_limits<std::size_t>::max() / count ||
        buffer_size > std::numeric_limits<std::uint32_t>::max())
        throw std::invalid_argument(call + ": too large (a receive buffer holds at most 4 GiB - 1)");
    const auto& pd = connection_.qp()->pd();
    if (pool && pool->pd() != pd)
        throw std::invalid_argument(call + ": the pool is on another protection domain than the connection, so "
                                           "the device could not write into its memory; use the pool of the "
                                           "builder (builder::pool()) that made the connection");
    if (!pool) {
        // A pool of one chunk, just big enough (chunks are whole pages).
        std::size_t chunk = std::max<std::size_t>(4096, (stride * count + 4095) / 4096 * 4096);
        pool = memory_pool::create(pd, access_flags::local_write, chunk);
    }
    local_mr region = pool->allocate(stride * count, 64);
    std::vector<local_slice> buffers;
    buffers.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
        buffers.push_back(region.slice(i * stride, buffer_size));
    start(std::move(buffers));
}

receive_queue::receive_queue(cordma::connection conn, std::vector<local_slice> buffers)
    : connection_(std::move(conn)) {
    check_connection(connection_);
    const std::string call = "receive_queue(" + std::to_string(buffers.size()) +
                             " buffers) on the connection to " + connection_.peer();
    if (buffers.empty())
        throw std::invalid_argument(call + ": give at least one buffer");
    std::size_t depth = connection_.qp()->capacity().max_recv_wr;
    if (buffers.size() > depth)
        throw std::invalid_argument(call + ": the connection's receive queue has only " + std::to_string(depth) +
                                    " entries; use fewer buffers, or a deeper receive queue "
                                    "(builder::recv_queue_depth)");
    const auto& pd = connection_.qp()->pd();
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        const local_slice& b = buffers[i];
        std::string which = call + ": buffer " + std::to_string(i);
        if (!b.block() || b.size() == 0)
            throw std::invalid_argument(which + " is empty (from a moved-from or default local_mr, or of length 0)");
        if (b.size() > std::numeric_limits<std::uint32_t>::max())
            throw std::invalid_argument(which + " is larger than a receive can be (4 GiB - 1)");
        if (!contains(b.block()->access, access_flags::local_write))
            throw std::invalid_argument(which + " is registered with " + to_string(b.block()->access) +
                                        ", without local_write: the device could not write a message into it");
        if (b.block()->pool && b.block()->pool->pd() != pd)
            throw std::invalid_argument(which + " is on another protection domain than the connection; take it "
                                                "from the pool of the builder that made the connection");
    }
    start(std::move(buffers));
}

void receive_queue::start(std::vector<local_slice> buffers) {
    auto state = std::make_shared<detail::receive_queue_state>(detail::connection_access::state(connection_),
                                                               std::move(buffers));
    // Posted before the constructor returns, so a peer told "ready" right
    // after finds every receive there.
    detail::run_and_wait(*connection_.event_listener(), [&state] { state->open(); });
    state_ = std::move(state);
}

void receive_queue::close() noexcept {
    if (!state_)
        return;
    auto state = std::move(state_);
    try {
        state->on_event_listener_thread([state] { state->close(); });
    } catch (const std::exception& e) {
        detail::logf(log_level::error, "cordma: receive_queue on the connection to %s: closing: %s",
                     state->connection().peer().c_str(), e.what());
    }
}

receive_queue::~receive_queue() { close(); }

receive_queue& receive_queue::operator=(receive_queue&& other) noexcept {
    if (this != &other) {
        close();
        connection_ = std::move(other.connection_);
        state_ = std::move(other.state_);
    }
    return *this;
}

const std::shared_ptr<detail::receive_queue_state>& receive_queue::checked_state(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("receive_queue::") + call +
                               ": an empty receive_queue (default-constructed or moved from)");
    return state_;
}

receive_queue::next_operation receive_queue::next(std::stop_token token) {
    return next_operation(checked_state("next"), no_timeout, std::move(token));
}

receive_queue::next_operation receive_queue::next(std::chrono::nanoseconds timeout, std::stop_token token) {
    return next_operation(checked_state("next"), std::max(timeout, std::chrono::nanoseconds::zero()),
                          std::move(token));
}

std::size_t receive_queue::size() const { return checked_state("size")->size(); }

const cordma::connection& receive_queue::connection() const {
    checked_state("connection");
    return connection_;
}

// ---- next_operation ------------------------------------------------------

receive_queue::next_operation::next_operation(std::shared_ptr<detail::message_queue_state> queue,
                                              std::chrono::nanoseconds timeout, std::stop_token token) noexcept
    : queue_(std::move(queue)), timeout_(timeout), token_(std::move(token)) {}

receive_queue::next_operation::next_operation(next_operation&& other) noexcept
    : queue_(std::move(other.queue_)), timeout_(other.timeout_), token_(std::move(other.token_)) {}

receive_queue::next_operation::~next_operation() {
    if (!queue_)
        return;
    // A coroutine destroyed while waiting (event listener thread, as for
    // every operation): it takes nothing with it.
    if (waiting_)
        queue_->abandon(this);
    if (slot_ != nullptr) {
        try {
            queue_->on_event_listener_thread([q = queue_, s = slot_] { q->put_back(s); });
        } catch (...) {
        }
    }
}

bool receive_queue::next_operation::await_suspend(std::coroutine_handle<> h) {
    continuation_ = h;
    ticket_ = detail::next_cancellation_ticket();
    if (token_.stop_possible()) {
        if (token_.stop_requested()) {
            error_ = std::make_exception_ptr(
                operation_cancelled(queue_->call(), queue_->source(), "no message was taken"));
            done_ = true;
            return false;
        }
        cancel_callback_.emplace(token_, canceller{queue_, this, ticket_});
    }
    const auto& el = queue_->event_listener();
    if (el->running_in_this_thread())
        return queue_->wait(this);
    // Awaited on another thread: hop to the event listener once.
    el->post([q = queue_, op = this] {
        if (!q->wait(op))
            op->continuation_.resume();
    });
    return true;
}

received_message receive_queue::next_operation::await_resume() {
    cancel_callback_.reset();
    if (error_)
        std::rethrow_exception(error_);
    received_message m;
    detail::work_slot* slot = std::exchange(slot_, nullptr);
    m.queue_ = queue_;
    m.slot_ = slot;
    m.data_ = slot->buffer_count > 0 ? slot->buffers[0].data() : nullptr;
    m.size_ = slot->byte_len;
    if (slot->has_imm)
        m.imm_ = slot->received_imm;
    m.qp_num_ = slot->source_qp;
    return m;
}

void receive_queue::next_operation::canceller::operator()() const noexcept {
    try {
        queue->event_listener()->post(
            [q = queue, op = op, ticket = ticket] { q->cancel(op, ticket, false); });
    } catch (...) {
        // Out of memory while cancelling: next() waits for its message.
    }
}

// ---- received_message ----------------------------------------------------

received_message& received_message::operator=(received_message&& other) noexcept {
    if (this != &other) {
        release();
        queue_ = std::move(other.queue_);
        slot_ = std::exchange(other.slot_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        imm_ = std::exchange(other.imm_, std::nullopt);
        qp_num_ = other.qp_num_;
    }
    return *this;
}

local_slice received_message::buffer() const {
    if (slot_ == nullptr || slot_->buffer_count == 0)
        return {};
    return slot_->buffers[0];
}

void received_message::release() noexcept {
    if (slot_ == nullptr)
        return;
    auto queue = std::move(queue_);
    detail::work_slot* slot = std::exchange(slot_, nullptr);
    data_ = nullptr;
    size_ = 0;
    imm_.reset();
    try {
        queue->on_event_listener_thread([queue, slot] { queue->release(slot); });
    } catch (const std::exception& e) {
        detail::logf(log_level::error, "cordma: received_message::release: %s (the buffer is not posted again)",
                     e.what());
    }
}

}  // namespace cordma

namespace cordma::detail {

void receive_queue_access::set_refill(receive_queue& queue, std::shared_ptr<receive_refill> refill) {
    queue.checked_state("receive_queue")->set_refill(std::move(refill));
}

std::uint64_t receive_queue_access::reposts(const receive_queue& queue) {
    return queue.checked_state("receive_queue")->reposts();
}

}  // namespace cordma::detail
