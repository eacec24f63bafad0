#include <cordma/connection.hpp>
#include <cordma/detail/agent.hpp>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>

namespace cordma {

namespace detail {

std::uint64_t next_cancellation_ticket() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

void canceller::operator()() const noexcept {
    try {
        auto state = op->connection->shared_from_this();
        state->listener()->post([state, op = op, ticket = ticket] { state->cancel(op, ticket); });
    } catch (...) {
        // Out of memory while cancelling: the operation completes normally.
    }
}

void start_from_any_thread(operation_base* op) {
    auto state = op->connection->shared_from_this();
    state->listener()->post([state, op] {
        if (!state->start(op))
            op->continuation.resume();
    });
}

void operation_base::rethrow_if_failed() const {
    if (error) [[unlikely]]
        std::rethrow_exception(error);
    if (status != IBV_WC_SUCCESS) [[unlikely]]
        throw work_completion_error(status, to_string(kind), vendor_error, connection->peer());
}

const char* to_string(op_kind kind) noexcept {
    switch (kind) {
    case op_kind::send: return "send";
    case op_kind::send_with_imm: return "send_with_imm";
    case op_kind::write: return "write";
    case op_kind::write_with_imm: return "write_with_imm";
    case op_kind::read: return "read";
    case op_kind::fetch_add: return "fetch_add";
    case op_kind::compare_swap: return "compare_swap";
    case op_kind::recv: return "recv";
    }
    return "operation";
}

connection_state::connection_state(std::shared_ptr<event_listener> listener, std::shared_ptr<queue_pair> qp,
                                   std::string peer)
    : listener_(std::move(listener)), qp_(std::move(qp)), peer_(std::move(peer)),
      send_slots_(qp_->capacity().max_send_wr), recv_slots_(qp_->capacity().max_recv_wr),
      atomic_results_(send_slots_.size()) {
    atomic_results_mr_ = memory_region::register_memory(qp_->pd(), atomic_results_.data(),
                                                        atomic_results_.size() * sizeof(std::uint64_t),
                                                        access_flags::local_write);
    auto init = [this](std::vector<work_slot>& slots, bool receive) {
        work_slot* head = nullptr;
        for (std::size_t i = slots.size(); i-- > 0;) {
            work_slot& slot = slots[i];
            slot.on_complete = &connection_state::on_complete;
            slot.owner = this;
            slot.receive = receive;
            slot.next_free = head;
            if (!receive) {
                slot.atomic_result = &atomic_results_[i];
                slot.atomic_lkey = atomic_results_mr_.lkey();
            }
            head = &slot;
        }
        return head;
    };
    free_send_ = init(send_slots_, false);
    free_recv_ = init(recv_slots_, true);
}

connection_state::~connection_state() {
    if (agent) {
        // The agent (and its control QP) would otherwise outlive us, kept
        // alive by its own receive loops.
        auto a = std::move(agent);
        if (listener_->running_in_this_thread())
            a->shut_down("connection closed");
        else
            listener_->post([a] { a->shut_down("connection closed"); });
    }
}

bool connection_state::start(operation_base* op) noexcept {
    if (broken_) {
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        return false;
    }
    bool receive = is_receive(op->kind);
    work_slot*& free = receive ? free_recv_ : free_send_;
    if (free == nullptr) {
        enqueue(op);
        return true;
    }
    work_slot* slot = free;
    free = slot->next_free;
    try {
        post(op, slot);
    } catch (...) {
        slot->op = nullptr;
        slot->next_free = free;
        free = slot;
        fail(op, std::current_exception());
        return false;
    }
    if (outstanding_++ == 0)
        self_while_busy_ = shared_from_this();
    return true;
}

void connection_state::post(operation_base* op, work_slot* slot) {
    ibv_sge sges[max_sges];
    for (std::size_t i = 0; i < op->sge_count; ++i) {
        const local_slice& s = op->local[i];
        sges[i] = {reinterpret_cast<std::uint64_t>(s.data()), static_cast<std::uint32_t>(s.size()), s.lkey()};
    }
    if (op->kind == op_kind::recv) {
        ibv_recv_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        qp_->post_recv(wr);
    } else {
        ibv_send_wr wr{};
        wr.wr_id = slot->as_wr_id();
        wr.sg_list = sges;
        wr.num_sge = op->sge_count;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = op->remote.address;
        wr.wr.rdma.rkey = op->remote.rkey;
        switch (op->kind) {
        case op_kind::send: wr.opcode = IBV_WR_SEND; break;
        case op_kind::send_with_imm:
            wr.opcode = IBV_WR_SEND_WITH_IMM;
            wr.imm_data = htonl(op->imm);
            break;
        case op_kind::write: wr.opcode = IBV_WR_RDMA_WRITE; break;
        case op_kind::write_with_imm:
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(op->imm);
            break;
        case op_kind::read: wr.opcode = IBV_WR_RDMA_READ; break;
        case op_kind::fetch_add:
        case op_kind::compare_swap:
            wr.opcode = op->kind == op_kind::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic.remote_addr = op->remote.address;
            wr.wr.atomic.rkey = op->remote.rkey;
            wr.wr.atomic.compare_add = op->compare_add;
            wr.wr.atomic.swap = op->swap;
            sges[0] = {reinterpret_cast<std::uint64_t>(slot->atomic_result), 8, slot->atomic_lkey};
            wr.num_sge = 1;
            break;
        case op_kind::recv: break;
        }
        // Small payloads ride inside the work request: no DMA read of the
        // buffer, lower latency. Only for sends and writes.
        if ((op->kind == op_kind::send || op->kind == op_kind::send_with_imm || op->kind == op_kind::write ||
             op->kind == op_kind::write_with_imm) &&
            op->sge_count == 1 && sges[0].length <= qp_->capacity().max_inline_data)
            wr.send_flags |= IBV_SEND_INLINE;
        qp_->post_send(wr);
    }
    // Posted: from here the slot, not the frame, holds the buffers.
    for (std::size_t i = 0; i < op->sge_count; ++i)
        slot->keep_alive[i] = std::move(const_cast<std::shared_ptr<mr_block>&>(op->local[i].block()));
    slot->op = op;
    slot->ticket = op->ticket;
    op->slot = slot;
}

void connection_state::on_complete(completion_target* target, const ibv_wc& wc) noexcept {
    auto* slot = static_cast<work_slot*>(target);
    slot->owner->complete(slot, wc);
}

void connection_state::complete(work_slot* slot, const ibv_wc& wc) noexcept {
    operation_base* op = slot->op;
    for (auto& block : slot->keep_alive)
        block.reset();
    if (op != nullptr) {
        op->slot = nullptr;
        op->done = true;
        op->status = wc.status;
        op->vendor_error = wc.vendor_err;
        if (wc.status == IBV_WC_SUCCESS) {
            op->byte_len = wc.byte_len;
            // A bit test: real NICs set other flags beside WITH_IMM.
            op->has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
            op->received_imm = op->has_imm ? ntohl(wc.imm_data) : 0;
            if (op->kind == op_kind::fetch_add || op->kind == op_kind::compare_swap)
                op->old_value = *slot->atomic_result;
        }
    }
    if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR && !broken_)
        mark_broken(std::string("an earlier ") + (op ? to_string(op->kind) : "abandoned operation") +
                    " failed with " + ibv_wc_status_str(wc.status) + " (status " +
                    std::to_string(static_cast<int>(wc.status)) + ")");
    slot->op = nullptr;
    work_slot*& free = slot->receive ? free_recv_ : free_send_;
    slot->next_free = free;
    free = slot;
    // Keep ourselves alive through the resumptions below, which may drop
    // the last handle to this connection.
    std::shared_ptr<connection_state> keep = --outstanding_ == 0 ? std::move(self_while_busy_) : nullptr;
    promote_waiters(slot->receive);
    if (op != nullptr)
        op->continuation.resume();
}

void connection_state::promote_waiters(bool receive) noexcept {
    for (;;) {
        operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
        work_slot* free = receive ? free_recv_ : free_send_;
        if (head == nullptr || free == nullptr)
            return;
        operation_base* op = head;
        unlink(op);
        if (!start(op))
            op->continuation.resume();
    }
}

void connection_state::enqueue(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
    operation_base*& tail = receive ? recv_waiters_tail_ : send_waiters_tail_;
    op->waiting = true;
    op->next_waiting = nullptr;
    op->prev_waiting = tail;
    (tail ? tail->next_waiting : head) = op;
    tail = op;
}

void connection_state::unlink(operation_base* op) noexcept {
    bool receive = is_receive(op->kind);
    operation_base*& head = receive ? recv_waiters_head_ : send_waiters_head_;
    operation_base*& tail = receive ? recv_waiters_tail_ : send_waiters_tail_;
    (op->prev_waiting ? op->prev_waiting->next_waiting : head) = op->next_waiting;
    (op->next_waiting ? op->next_waiting->prev_waiting : tail) = op->prev_waiting;
    op->next_waiting = op->prev_waiting = nullptr;
    op->waiting = false;
}

void connection_state::fail(operation_base* op, std::exception_ptr error) noexcept {
    op->error = std::move(error);
    op->done = true;
}

void connection_state::abandon(operation_base* op) noexcept {
    if (op->waiting)
        unlink(op);
    else if (op->slot != nullptr && op->slot->op == op)
        op->slot->op = nullptr;  // orphaned: the completion just frees the slot
    op->slot = nullptr;
}

void connection_state::cancel(operation_base* op, std::uint64_t ticket) noexcept {
    // `op` may be long gone: find it among the live ones before touching it.
    for (operation_base* head : {send_waiters_head_, recv_waiters_head_})
        for (operation_base* w = head; w != nullptr; w = w->next_waiting)
            if (w == op && w->ticket == ticket) {
                unlink(op);
                fail(op, std::make_exception_ptr(operation_cancelled(to_string(op->kind), peer_)));
                op->continuation.resume();
                return;
            }
    for (auto* slots : {&send_slots_, &recv_slots_})
        for (work_slot& slot : *slots)
            if (slot.op == op && slot.ticket == ticket) {
                slot.op = nullptr;  // the completion will only free the slot
                op->slot = nullptr;
                fail(op, std::make_exception_ptr(operation_cancelled(to_string(op->kind), peer_)));
                op->continuation.resume();
                return;
            }
}

void connection_state::mark_broken(const std::string& why) noexcept {
    broken_ = true;
    broken_reason_ = why;
    fail_waiters();
}

void connection_state::fail_waiters() noexcept {
    while (send_waiters_head_ != nullptr || recv_waiters_head_ != nullptr) {
        operation_base* op = send_waiters_head_ ? send_waiters_head_ : recv_waiters_head_;
        unlink(op);
        fail(op, std::make_exception_ptr(disconnected_error(to_string(op->kind), peer_, broken_reason_)));
        op->continuation.resume();
    }
}

void connection_state::set_transport(std::shared_ptr<transport> t) {
    transport_ = std::move(t);
    transport_->attach(weak_from_this());
}

void connection_state::shut_down(const std::string& why) noexcept {
    if (!broken_)
        mark_broken(why);
    if (agent)
        agent->shut_down(why);
    try {
        qp_->to_error();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cordma: shutting down connection to %s: %s\n", peer_.c_str(), e.what());
    }
}

}  // namespace detail

connection connection::adopt(std::shared_ptr<event_listener> listener, std::shared_ptr<queue_pair> qp,
                             std::string peer) {
    return connection(std::make_shared<detail::connection_state>(std::move(listener), std::move(qp), std::move(peer)));
}

void connection::shut_down() {
    auto state = state_;
    if (state->listener()->running_in_this_thread())
        state->shut_down("connection shut down by this side");
    else
        state->listener()->post([state] { state->shut_down("connection shut down by this side"); });
}

task<void> connection::close() {
    auto state = state_;
    co_await state->listener()->schedule();
    if (!state->broken() && state->get_transport())
        co_await state->get_transport()->close();
    state->shut_down("connection closed by this side");
}

std::shared_ptr<detail::agent> connection::agent_for(const char* call) const {
    if (!state_->agent)
        throw std::logic_error(std::string("connection::") + call + " to " + peer() +
                               ": this connection has no agent: it was made with connection::adopt, or the peer is "
                               "not cordma. Connections from a builder and from connect_loopback have one");
    return state_->agent;
}

task<remote_region> connection::request_remote_mr(std::size_t size, std::size_t alignment,
                                                  std::chrono::milliseconds lease, access_flags rights) {
    if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
        throw std::invalid_argument("connection::request_remote_mr(size=" + std::to_string(size) + ", alignment=" +
                                    std::to_string(alignment) + ") to " + peer() +
                                    ": size must be nonzero and alignment a power of two <= 4096");
    auto a = agent_for("request_remote_mr");
    co_await state_->listener()->schedule();
    co_return co_await a->request_remote_mr(size, alignment, lease, rights);
}

task<void> connection::send_local_mr(local_slice region, std::chrono::milliseconds lease, access_flags rights) {
    if (!region.block())
        throw std::invalid_argument("connection::send_local_mr to " + peer() + ": an empty local_slice");
    auto a = agent_for("send_local_mr");
    co_await state_->listener()->schedule();
    co_await a->send_local_mr(std::move(region), lease, rights);
}

task<remote_region> connection::receive_remote_mr() {
    auto a = agent_for("receive_remote_mr");
    co_await state_->listener()->schedule();
    co_return co_await a->receive_remote_mr();
}

task<void> connection::send_remote_mr(remote_region region) {
    auto a = agent_for("send_remote_mr");
    co_await state_->listener()->schedule();
    co_await a->send_remote_mr(std::move(region));
}

task<local_mr> connection::receive_local_mr() {
    auto a = agent_for("receive_local_mr");
    co_await state_->listener()->schedule();
    co_return co_await a->receive_local_mr();
}

task<std::size_t> connection::revoke_local_mr(local_slice region) {
    auto a = agent_for("revoke_local_mr");
    co_await state_->listener()->schedule();
    co_return co_await a->revoke(std::move(region));
}

task<connection> connection::new_connection() {
    if (!state_->reopen)
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

void connection::check_remote_size(const char* call, std::size_t local, const remote_mr& remote) const {
    if (local != remote.length)
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer() + ": local length " +
                                    std::to_string(local) + " differs from " + to_string(remote) +
                                    "; slice one of them to match");
}

void connection::check_atomic_target(const char* call, const remote_mr& remote) const {
    if (remote.length < 8 || remote.address % 8 != 0)
        throw std::invalid_argument(std::string("connection::") + call + " to " + peer() + ": target " +
                                    to_string(remote) + " must be an 8-byte aligned word of at least 8 bytes");
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
    check_sg_list("send", {&local, 1}, qp()->capacity().max_send_sge);
    return {state_.get(), detail::op_kind::send, std::move(token), {.sg_list = {&local, 1}}};
}

operation<void> connection::send_with_imm(local_slice local, std::uint32_t imm, std::stop_token token) {
    check_sg_list("send_with_imm", {&local, 1}, qp()->capacity().max_send_sge);
    return {state_.get(), detail::op_kind::send_with_imm, std::move(token), {.sg_list = {&local, 1}, .imm = imm}};
}

operation<recv_result> connection::recv(local_slice local, std::stop_token token) {
    return recv(std::span<const local_slice>(&local, 1), std::move(token));
}

operation<recv_result> connection::recv(std::span<const local_slice> sg_list, std::stop_token token) {
    check_sg_list("recv", sg_list, qp()->capacity().max_recv_sge);
    return {state_.get(), detail::op_kind::recv, std::move(token), {.sg_list = sg_list}};
}

operation<recv_result> connection::receive_write_imm(std::stop_token token) {
    return {state_.get(), detail::op_kind::recv, std::move(token), {}};
}

operation<void> connection::write(local_slice local, remote_mr remote, std::stop_token token) {
    return write(std::span<const local_slice>(&local, 1), remote, std::move(token));
}

operation<void> connection::write(std::span<const local_slice> sg_list, remote_mr remote, std::stop_token token) {
    check_sg_list("write", sg_list, qp()->capacity().max_send_sge);
    check_remote_size("write", total_size(sg_list), remote);
    return {state_.get(), detail::op_kind::write, std::move(token), {.sg_list = sg_list, .remote = remote}};
}

operation<void> connection::write_with_imm(local_slice local, remote_mr remote, std::uint32_t imm,
                                           std::stop_token token) {
    check_sg_list("write_with_imm", {&local, 1}, qp()->capacity().max_send_sge);
    check_remote_size("write_with_imm", local.size(), remote);
    return {state_.get(), detail::op_kind::write_with_imm, std::move(token),
            {.sg_list = {&local, 1}, .remote = remote, .imm = imm}};
}

operation<void> connection::read(local_slice local, remote_mr remote, std::stop_token token) {
    return read(std::span<const local_slice>(&local, 1), remote, std::move(token));
}

operation<void> connection::read(std::span<const local_slice> sg_list, remote_mr remote, std::stop_token token) {
    check_sg_list("read", sg_list, qp()->capacity().max_send_sge);
    check_remote_size("read", total_size(sg_list), remote);
    return {state_.get(), detail::op_kind::read, std::move(token), {.sg_list = sg_list, .remote = remote}};
}

operation<std::uint64_t> connection::fetch_add(remote_mr remote, std::uint64_t add, std::stop_token token) {
    check_atomic_target("fetch_add", remote);
    return {state_.get(), detail::op_kind::fetch_add, std::move(token),
            {.sg_list = {}, .remote = remote.slice(0, 8), .compare_add = add}};
}

operation<std::uint64_t> connection::compare_swap(remote_mr remote, std::uint64_t compare, std::uint64_t swap,
                                                  std::stop_token token) {
    check_atomic_target("compare_swap", remote);
    return {state_.get(), detail::op_kind::compare_swap, std::move(token),
            {.sg_list = {}, .remote = remote.slice(0, 8), .compare_add = compare, .swap = swap}};
}

std::pair<connection, connection> connect_loopback(std::shared_ptr<event_listener> listener,
                                                   const qp_capacity& capacity, qp_connect_options options,
                                                   std::shared_ptr<memory_pool> pool, agent_limits limits) {
    const auto& device = listener->device();
    auto pd = pool ? pool->pd() : protection_domain::create(device);
    if (!pool)
        pool = memory_pool::create(pd);
    if (options.port == 0 || options.port == 1)
        options.port = device->first_active_port();
    options.gid_index = device->find_gid_index(options.port, AF_INET);
    auto make_pair = [&](const qp_capacity& cap) {
        auto make_qp = [&] {
            int entries = static_cast<int>(cap.max_send_wr + cap.max_recv_wr);
            return queue_pair::create(pd, listener->create_cq(entries), listener->create_cq(entries), cap);
        };
        auto a = make_qp();
        auto b = make_qp();
        a->connect(b->local_endpoint(options.port, options.gid_index), options);
        b->connect(a->local_endpoint(options.port, options.gid_index), options);
        return std::pair{a, b};
    };
    auto [a, b] = make_pair(capacity);
    // The agents' control channel: small, and patient with receivers that
    // are not ready (its receives are re-posted as soon as handled).
    qp_capacity control_capacity{.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1,
                                 .max_inline_data = 0};
    qp_connect_options control_options = options;
    control_options.rnr_retry = 7;
    std::swap(options, control_options);
    auto [ca, cb] = make_pair(control_capacity);
    std::string name = device->name() + " loopback qpn ";
    connection first = connection::adopt(listener, a, name + std::to_string(b->qp_num()));
    connection second = connection::adopt(listener, b, name + std::to_string(a->qp_num()));
    connection control_first = connection::adopt(listener, ca, first.peer() + " (agent)");
    connection control_second = connection::adopt(listener, cb, second.peer() + " (agent)");
    for (auto* c : {&first, &second})
        c->state()->agent = std::make_shared<detail::agent>(pool, limits, c->peer());
    listener->post([first, second, control_first, control_second] {
        first.state()->agent->attach(control_first, first.state());
        second.state()->agent->attach(control_second, second.state());
    });
    return {first, second};
}

}  // namespace cordma
