// connection: the public handle and its operations (checked here, started
// by the connection state). The agent calls it forwards are in
// lib/agent/connection_agent_calls.cpp.
#include <cordma/connection.hpp>

#include <atomic>
#include <stdexcept>

#include "engine/connection_state.hpp"
#include "engine/rail_stripes.hpp"
#include "engine/run_and_wait.hpp"

namespace cordma {

namespace detail {

std::uint64_t next_cancellation_ticket() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

void canceller::operator()() const noexcept {
    try {
        auto state = op->connection->shared_from_this();
        state->event_listener()->post([state, op = op, ticket = ticket] { state->cancel(op, ticket); });
    } catch (...) {
        // Out of memory while cancelling: the operation completes normally.
    }
}

bool start_operation(operation_base* op, const std::stop_token* stop) {
    connection_state* state = op->connection;
    if (state->event_listener()->running_in_this_thread())
        return state->start(op);
    // Awaited on another thread: hop to the event listener once. A stop requested
    // meanwhile, from a third thread, posts its cancel from there: that can
    // run before this start, find nothing to cancel, and the operation would
    // then wait as if never stopped (a recv, for a message that may never
    // come). So look at the token here too, as receive_queue's wait does.
    auto keep = state->shared_from_this();
    keep->event_listener()->post([keep, op, stop] {
        if (stop != nullptr && stop->stop_requested()) {
            cancel_before_start(op);
            op->wake();
        } else if (!keep->start(op)) {
            op->wake();
        }
    });
    return true;
}

void abandon_operation(operation_base* op) noexcept { op->connection->abandon(op); }

void cancel_before_start(operation_base* op) noexcept {
    try {
        op->error = std::make_exception_ptr(operation_cancelled(to_string(op->kind), op->connection->peer()));
    } catch (...) {
        op->error = std::current_exception();
    }
    op->done = true;
}

void operation_base::rethrow_if_failed() const {
    if (error) [[unlikely]]
        std::rethrow_exception(error);
    if (status != IBV_WC_SUCCESS) [[unlikely]]
        throw work_completion_error(status, to_string(kind), vendor_error, connection->peer());
}

const char* to_string(op_kind kind) noexcept { return cordma::name(kind); }

}  // namespace detail

detail::connection_state& connection::checked_state(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("connection::") + call +
                               ": an empty connection (default-constructed or moved from); get one from "
                               "builder::connect, listener::accept or connect_loopback");
    return *state_;
}

const std::string& connection::peer() const { return checked_state("peer").peer(); }
connection_counters connection::counters() const { return checked_state("counters").tally().read(); }
const std::shared_ptr<queue_pair>& connection::qp() const { return checked_state("qp").qp(); }
const std::shared_ptr<event_listener>& connection::event_listener() const {
    return checked_state("event_listener").event_listener();
}
bool connection::is_broken() const { return checked_state("is_broken").broken(); }

std::vector<rail_info> connection::rails() const {
    detail::connection_state& state = checked_state("rails");
    std::vector<rail_info> out;
    detail::run_and_wait(*state.event_listener(), [&] {
        auto add = [&out](const detail::connection_state& rail) {
            out.push_back({rail.qp()->pd()->device()->name(), rail.qp()->qp_num(), !rail.broken(),
                           rail.broken() ? rail.broken_reason() : std::string(), rail.tally().read()});
        };
        add(state);
        if (const detail::rail_stripes* stripes = state.stripes())
            for (const auto& rail : stripes->rails())
                add(*rail);
    });
    return out;
}

connection connection::adopt(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<queue_pair> qp,
                             std::string peer) {
    return connection(std::make_shared<detail::connection_state>(std::move(el), std::move(qp), std::move(peer)));
}

void connection::shut_down() {
    checked_state("shut_down");
    auto state = state_;
    if (state->event_listener()->running_in_this_thread())
        state->shut_down("connection shut down by this side", disconnect_cause::closed_here);
    else
        state->event_listener()->post(
            [state] { state->shut_down("connection shut down by this side", disconnect_cause::closed_here); });
}

task<void> connection::close() {
    checked_state("close");
    auto state = state_;
    co_await state->event_listener()->schedule();
    // The peer's answer to our disconnect may end it first: still ours.
    state->closing_here = true;
    if (!state->broken() && state->transport())
        co_await state->transport()->close();
    state->shut_down("connection closed by this side", disconnect_cause::closed_here);
}

task<connection> connection::new_connection() {
    if (!checked_state("new_connection").reopen)
        throw std::logic_error("connection::new_connection() to " + peer() +
                               ": only the side that connected can open more queue pairs (the peer's listener "
                               "accepts them); use builder::connect there");
    return state_->reopen();
}

void connection::check_sg_list(const char* call, std::span<const local_slice> sg_list, std::size_t limit) const {
    std::size_t allowed = std::min(limit, detail::max_sges);
    if (sg_list.empty() || sg_list.size() > allowed)
        throw std::invalid_argument(std::string("connection::") + call + "(sg_list of " +
                                    std::to_string(sg_list.size()) + " slices) to " + peer() +
                                    ": between 1 and " + std::to_string(allowed) + " slices are allowed");
    for (const auto& s : sg_list)
        if (!s.block())
            throw std::invalid_argument(std::string("connection::") + call + " to " + peer() +
                                        ": an empty local_slice (from a moved-from or default local_mr)");
}

void connection::check_remote_access(const char* call, const remote_slice& remote, access_flags needed) const {
    if (!contains(remote.access, needed))
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer() + ": " + to_string(remote) +
                                    " does not allow " + to_string(needed) +
                                    " (the owner granted only that); nothing was posted");
}

void connection::check_remote_size(const char* call, std::size_t local, const remote_slice& remote) const {
    if (local != remote.length)
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer() + ": local length " +
                                    std::to_string(local) + " differs from " + to_string(remote) +
                                    "; slice one of them to match");
}

void connection::check_atomic_target(const char* call, const remote_slice& remote) const {
    if (remote.length < 8 || remote.address % 8 != 0)
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer() + ": target " +
                                    to_string(remote) + " must be an 8-byte aligned word of at least 8 bytes");
    check_remote_access(call, remote, access_flags::remote_atomic);
}

namespace {

std::size_t total_size(std::span<const local_slice> sg_list) {
    std::size_t total = 0;
    for (const auto& s : sg_list)
        total += s.size();
    return total;
}

}  // namespace

operation<void> connection::send(local_slice local, std::stop_token token) {
    check_sg_list("send", {&local, 1}, checked_state("send").qp()->capacity().max_send_sge);
    return {&checked_state("send"), detail::op_kind::send, std::move(token), {.sg_list = {}, .owned = &local}};
}

operation<void> connection::send_with_imm(local_slice local, std::uint32_t imm, std::stop_token token) {
    check_sg_list("send_with_imm", {&local, 1}, checked_state("send_with_imm").qp()->capacity().max_send_sge);
    return {&checked_state("send_with_imm"), detail::op_kind::send_with_imm, std::move(token), {.sg_list = {}, .owned = &local, .imm = imm}};
}

operation<recv_result> connection::recv(local_slice local, std::stop_token token) {
    if (checked_state("recv").qp()->srq() == nullptr)
        check_sg_list("recv", {&local, 1}, checked_state("recv").qp()->capacity().max_recv_sge);
    return {&checked_state("recv"), detail::op_kind::recv, std::move(token), {.sg_list = {}, .owned = &local}};
}

operation<recv_result> connection::recv(std::span<const local_slice> sg_list, std::stop_token token) {
    // A connection on a shared receive queue has no receive queue to size
    // a scatter list by: the operation itself says why it cannot run.
    if (checked_state("recv").qp()->srq() == nullptr)
        check_sg_list("recv", sg_list, checked_state("recv").qp()->capacity().max_recv_sge);
    return {&checked_state("recv"), detail::op_kind::recv, std::move(token), {.sg_list = sg_list}};
}

operation<recv_result> connection::recv_imm(std::stop_token token) {
    return {&checked_state("recv_imm"), detail::op_kind::recv, std::move(token), {}};
}

operation<void> connection::write(local_slice local, remote_slice remote, std::stop_token token) {
    detail::connection_state& state = checked_state("write");
    // The checks that pass cost a few compares; the named error comes from
    // the full check only when one fails.
    if (!local.block() || state.qp()->capacity().max_send_sge == 0) [[unlikely]]
        check_sg_list("write", {&local, 1}, state.qp()->capacity().max_send_sge);
    if (local.size() != remote.length) [[unlikely]]
        check_remote_size("write", local.size(), remote);
    if (!contains(remote.access, access_flags::remote_write)) [[unlikely]]
        check_remote_access("write", remote, access_flags::remote_write);
    return {&state, detail::op_kind::write, std::move(token), {.sg_list = {}, .owned = &local, .remote = remote}};
}

operation<void> connection::write(std::span<const local_slice> sg_list, remote_slice remote, std::stop_token token) {
    check_sg_list("write", sg_list, checked_state("write").qp()->capacity().max_send_sge);
    check_remote_size("write", total_size(sg_list), remote);
    check_remote_access("write", remote, access_flags::remote_write);
    return {&checked_state("write"), detail::op_kind::write, std::move(token), {.sg_list = sg_list, .remote = remote}};
}

operation<void> connection::write_with_imm(local_slice local, remote_slice remote, std::uint32_t imm,
                                           std::stop_token token) {
    detail::connection_state& state = checked_state("write_with_imm");
    // The checks that pass cost a few compares; the named error comes from
    // the full check only when one fails.
    if (!local.block() || state.qp()->capacity().max_send_sge == 0) [[unlikely]]
        check_sg_list("write_with_imm", {&local, 1}, state.qp()->capacity().max_send_sge);
    if (local.size() != remote.length) [[unlikely]]
        check_remote_size("write_with_imm", local.size(), remote);
    if (!contains(remote.access, access_flags::remote_write)) [[unlikely]]
        check_remote_access("write_with_imm", remote, access_flags::remote_write);
    return {&state, detail::op_kind::write_with_imm, std::move(token),
            {.sg_list = {}, .owned = &local, .remote = remote, .imm = imm}};
}

operation<void> connection::read(local_slice local, remote_slice remote, std::stop_token token) {
    detail::connection_state& state = checked_state("read");
    // The checks that pass cost a few compares; the named error comes from
    // the full check only when one fails.
    if (!local.block() || state.qp()->capacity().max_send_sge == 0) [[unlikely]]
        check_sg_list("read", {&local, 1}, state.qp()->capacity().max_send_sge);
    if (local.size() != remote.length) [[unlikely]]
        check_remote_size("read", local.size(), remote);
    if (!contains(remote.access, access_flags::remote_read)) [[unlikely]]
        check_remote_access("read", remote, access_flags::remote_read);
    return {&state, detail::op_kind::read, std::move(token), {.sg_list = {}, .owned = &local, .remote = remote}};
}

operation<void> connection::read(std::span<const local_slice> sg_list, remote_slice remote, std::stop_token token) {
    check_sg_list("read", sg_list, checked_state("read").qp()->capacity().max_send_sge);
    check_remote_size("read", total_size(sg_list), remote);
    check_remote_access("read", remote, access_flags::remote_read);
    return {&checked_state("read"), detail::op_kind::read, std::move(token), {.sg_list = sg_list, .remote = remote}};
}

operation<std::uint64_t> connection::fetch_add(remote_slice remote, std::uint64_t add, std::stop_token token) {
    check_atomic_target("fetch_add", remote);
    return {&checked_state("fetch_add"), detail::op_kind::fetch_add, std::move(token),
            {.sg_list = {}, .remote = remote.slice(0, 8), .compare_add = add}};
}

operation<std::uint64_t> connection::compare_swap(remote_slice remote, std::uint64_t compare, std::uint64_t swap,
                                                  std::stop_token token) {
    check_atomic_target("compare_swap", remote);
    return {&checked_state("compare_swap"), detail::op_kind::compare_swap, std::move(token),
            {.sg_list = {}, .remote = remote.slice(0, 8), .compare_add = compare, .swap = swap}};
}

}  // namespace cordma
