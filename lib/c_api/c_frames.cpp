// One frame to or from one peer, from or into the caller's memory (see
// c_frames.hpp), and running a step for every peer at once.
#include "c_api/c_frames.hpp"

#include <cerrno>
#include <cstring>
#include <span>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

namespace cordma::detail::c_api {

namespace wire = link_wire;

local_slice user_buffer::registered(std::size_t offset, std::size_t length) {
    if (whole_) {
        if (registrations_.empty())
            registrations_.push_back(register_range(0, size_));
        return registrations_.front().slice(offset, length);
    }
    registrations_.push_back(register_range(offset, length));
    return registrations_.back();
}

local_slice user_buffer::register_range(std::size_t offset, std::size_t length) {
    // Only a target (local_write) goes through the cache: a send's or a
    // write's source keeps the access it asks for (none may be read-only
    // memory, which a local_write registration would refuse).
    if (length != 0 && access_ == access_flags::local_write)
        return builder_->local_registration({data_ + offset, length});
    return register_local_mr(builder_->pd(), data_ + offset, length, access_).all();
}

std::string describe_kind(frame_kind kind) {
    if (kind.op == wire::op::message)
        return "a message (cordma_send)";
    if (kind.op == all_to_all_op)
        return "its cordma_alltoall";
    if (kind.op == all_gather_op)
        return "its cordma_allgather";
    if (kind.op == barrier_op)
        return kind.extra == 1 ? "its cordma_barrier (arrival)" : "its cordma_barrier (release)";
    return "a frame of op " + wire::name(kind.op) + ", which no C call sends";
}

std::string peer_state::op_name(link_wire::op o) const {
    if (o == wire::op::message)
        return "cordma_send";
    if (o == all_to_all_op)
        return "cordma_alltoall";
    if (o == all_gather_op)
        return "cordma_allgather";
    if (o == barrier_op)
        return "cordma_barrier";
    return wire::name(o);
}

wire::header next_header(peer_state& p, frame_kind kind) noexcept {
    wire::header h;
    h.op = kind.op;
    h.extra = kind.extra;
    h.seq = ++p.next_seq;
    h.trace = p.trace;
    return h;
}

task<void> send_frame(std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* buf, std::size_t offset,
                      std::size_t length, std::stop_token token, const char* call) {
    p->check_usable();
    wire::header h = next_header(*p, kind);
    std::shared_ptr<peer_link> link = p->link;
    std::uint32_t before = link->frames_sent();
    bool cancelled = false;
    try {
        if (link->needs_room(length))
            co_await link->make_room(length, token);
        if (length <= link->inline_room()) {
            std::span<const std::byte> bytes(buf->data() + offset, length);
            co_await link->send_inline(h, bytes, token);
        } else {
            local_slice source = buf->registered(offset, length);
            co_await link->send(h, source, token);
        }
    } catch (const operation_cancelled&) {
        cancelled = true;
    }
    if (cancelled) {
        // The frame left but its fin did not come: the peer may still read
        // memory that is about to go. The link is out of step: close it.
        if (link->frames_sent() != before)
            p->fail_out_of_step(call);
        throw operation_cancelled(call, p->name);
    }
}

namespace {

[[noreturn]] void hold_and_throw(peer_state& p, inbound_frame f, int errnum, const std::string& why) {
    p.held.emplace(std::move(f));
    throw c_failure(errnum, why);
}

task<inbound_frame> next_frame(std::shared_ptr<peer_state> p, std::stop_token token) {
    p->check_usable();
    if (std::optional<inbound_frame> waiting = waiting_frame(*p))
        co_return std::move(*waiting);
    std::shared_ptr<peer_link> link = p->link;
    inbound_frame f = co_await link->take(expected_frame{}, token);
    co_return f;
}

}  // namespace

void check_frame(peer_state& p, inbound_frame& f, frame_kind kind, std::size_t max_len, bool exact,
                 const char* call) {
    const wire::header& h = f.header;
    frame_kind got{h.op, h.extra};
    int errnum = 0;
    std::string why;
    if (got.op != kind.op || got.extra != kind.extra) {
        errnum = EPROTO;
        why = "the next thing " + p.name + " sent is " + describe_kind(got) + ", but this side called " + call +
              ": make the matching call (nothing was lost)";
    } else if (exact && h.size != max_len) {
        errnum = EPROTO;
        why = p.name + " sent " + std::to_string(h.size) + " bytes for " + describe_kind(got) +
              ", this side's msg_size is " + std::to_string(max_len) + ": every peer must use the same msg_size";
    } else if (h.size > max_len) {
        errnum = EMSGSIZE;
        why = "the next message from " + p.name + " is " + std::to_string(h.size) + " bytes, more than max_len " +
              std::to_string(max_len) +
              ": call again with a buffer that large (cordma_peek tells the size); the message is kept";
    }
    if (errnum != 0)
        hold_and_throw(p, std::move(f), errnum, why);
}

std::optional<std::size_t> land_now(peer_state& p, inbound_frame& f, std::byte* into) {
    if (f.header.type != wire::frame::data) {
        p.held.emplace(std::move(f));  // read by the task that follows
        return std::nullopt;
    }
    auto size = static_cast<std::size_t>(f.header.size);
    if (size != 0)
        std::memcpy(into, wire::payload(f.message.bytes(), f.header).data(), size);
    const trace_id trace = f.header.trace;
    p.link->finish(f);
    p.last_trace = trace;  // delivered
    return size;
}

std::optional<inbound_frame> waiting_frame(peer_state& p) {
    if (p.held) {
        std::optional<inbound_frame> f(std::move(p.held));
        p.held.reset();
        return f;
    }
    return p.link->try_take_any();
}

task<std::size_t> take_frame(std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* buf, std::size_t offset,
                             std::size_t max_len, bool exact, std::stop_token token, const char* call) {
    inbound_frame f = co_await next_frame(p, token);
    check_frame(*p, f, kind, max_len, exact, call);
    if (f.header.type == wire::frame::data)
        co_return *land_now(*p, f, buf->data() + offset);
    auto size = static_cast<std::size_t>(f.header.size);
    std::shared_ptr<peer_link> link = p->link;
    local_slice into = buf->registered(offset, size);
    co_await link->fetch(f, into);
    const trace_id trace = f.header.trace;
    link->finish(f);
    p->last_trace = trace;  // delivered (read from the peer's memory)
    co_return size;
}

task<std::pair<frame_kind, std::size_t>> peek_frame(std::shared_ptr<peer_state> p, std::stop_token token) {
    inbound_frame f = co_await next_frame(p, token);
    std::pair<frame_kind, std::size_t> out{frame_kind{f.header.op, f.header.extra},
                                           static_cast<std::size_t>(f.header.size)};
    p->held.emplace(std::move(f));
    co_return out;
}

task<void> for_each_peer(std::vector<std::shared_ptr<peer_state>> peers, bool concurrently,
                         std::function<task<void>(std::shared_ptr<peer_state>)> work) {
    std::vector<std::exception_ptr> errors(peers.size());
    auto guarded = [](std::function<task<void>(std::shared_ptr<peer_state>)>* fn, std::shared_ptr<peer_state> p,
                      std::exception_ptr* error) -> task<void> {
        try {
            co_await (*fn)(p);
        } catch (...) {
            *error = std::current_exception();
        }
    };
    if (concurrently) {
        task_group all;
        for (std::size_t i = 0; i < peers.size(); ++i)
            all.spawn(guarded(&work, peers[i], &errors[i]));
        co_await all.join();
    } else {
        for (std::size_t i = 0; i < peers.size(); ++i)
            co_await guarded(&work, peers[i], &errors[i]);
    }
    std::string why;
    int first = 0;
    for (std::size_t i = 0; i < peers.size(); ++i) {
        if (!errors[i])
            continue;
        try {
            std::rethrow_exception(errors[i]);
        } catch (const operation_cancelled&) {
            throw;  // the call's deadline: run_call says so
        } catch (...) {
        }
        auto [errnum, reason] = classify(errors[i]);
        if (first == 0)
            first = errnum;
        why += (why.empty() ? "" : "; ") + peers[i]->name + ": " + reason;
    }
    if (first != 0)
        throw c_failure(first, why);
}

}  // namespace cordma::detail::c_api
