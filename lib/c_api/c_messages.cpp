// The C API's messages: cordma_send, cordma_recv, cordma_peek and
// cordma_broadcast (a send to every connected peer at once).
#include <cerrno>
#include <functional>
#include <optional>
#include <stop_token>

#include <cordma/cordma.h>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"
#include "c_api/c_frames.hpp"

using namespace cordma::detail::c_api;
using cordma::detail::inbound_frame;
using cordma::detail::peer_link;
namespace wire = cordma::detail::link_wire;

namespace {

constexpr frame_kind message_kind{wire::op::message, 0};

void check_buffer(const void* data, std::size_t len, const char* name) {
    if (data == nullptr && len != 0)
        throw c_failure(EINVAL, std::string(name) + " is NULL but its length is " + std::to_string(len) + " bytes");
}

cordma::task<int> send_task(cordma_context* ctx, std::shared_ptr<peer_state> p, const void* data, std::size_t len) {
    user_buffer buf(ctx->builder, data, len, cordma::access_flags::remote_read, false);
    std::stop_token token = call_token(*ctx);
    co_await send_frame(p, message_kind, &buf, 0, len, token, "cordma_send");
    co_return 0;
}

/// cordma_send with no coroutine, when the message goes at once: it fits
/// the peer's receives and a credit and a slot are free (the common case
/// of a small message). Nothing otherwise: send_task waits for them.
std::optional<int> send_now(peer_state& p, const void* data, std::size_t len) {
    p.check_usable();
    peer_link& link = *p.link;
    if (link.lost() || len > link.inline_room() || !link.can_send_now())
        return std::nullopt;
    link.send_inline_now(next_header(p, message_kind), {static_cast<const std::byte*>(data), len});
    return 0;
}

/// cordma_recv with no coroutine, when a message is already there and its
/// bytes came with it. Nothing otherwise: recv_task waits for it or reads
/// it.
std::optional<std::size_t> recv_now(peer_state& p, void* data, std::size_t max_len) {
    p.check_usable();
    std::optional<inbound_frame> f = waiting_frame(p);
    if (!f)
        return std::nullopt;
    check_frame(p, *f, message_kind, max_len, false, "cordma_recv");
    return land_now(p, *f, static_cast<std::byte*>(data));
}

/// After recv_now found nothing to land: waits for the next frame (one
/// coroutine below this one, the inbox's), or reads the held rts.
cordma::task<std::size_t> recv_task(cordma_context* ctx, std::shared_ptr<peer_state> p, void* data,
                                    std::size_t max_len) {
    std::stop_token token = call_token(*ctx);
    if (!p->held) {
        std::optional<inbound_frame> f = co_await p->link->take_any(token);
        if (!f)
            p->link->throw_gone();
        check_frame(*p, *f, message_kind, max_len, false, "cordma_recv");
        if (std::optional<std::size_t> got = land_now(*p, *f, static_cast<std::byte*>(data)))
            co_return *got;
    }
    user_buffer buf(ctx->builder, data, max_len, cordma::access_flags::local_write, false);
    std::size_t got = co_await take_frame(p, message_kind, &buf, 0, max_len, false, token, "cordma_recv");
    co_return got;
}

cordma::task<std::size_t> peek_task(cordma_context* ctx, std::shared_ptr<peer_state> p) {
    std::stop_token token = call_token(*ctx);
    std::pair<frame_kind, std::size_t> next = co_await peek_frame(p, token);
    if (next.first.op != message_kind.op)
        throw c_failure(EPROTO, "the next thing " + p->name + " sent is " + describe_kind(next.first) +
                                    ", not a message: make the matching call (nothing was lost)");
    co_return next.second;
}

cordma::task<int> broadcast_task(cordma_context* ctx, const void* data, std::size_t len) {
    user_buffer buf(ctx->builder, data, len, cordma::access_flags::remote_read, true);
    auto token = call_token(*ctx);
    auto peers = connected_peers(*ctx);
    std::function<cordma::task<void>(std::shared_ptr<peer_state>)> work = [&buf, token](std::shared_ptr<peer_state> p) {
        return send_frame(std::move(p), message_kind, &buf, 0, buf.size(), token, "cordma_broadcast");
    };
    co_await for_each_peer(std::move(peers), true, std::move(work));
    co_return 0;
}

}  // namespace

extern "C" {

int cordma_send(cordma_context* ctx, int peer, const void* data, size_t len) {
    return c_entry<int>("cordma_send", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        check_buffer(data, len, "data");
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        auto now = [&] { return send_now(*p, data, len); };
        return run_call(
            c, [&] { return send_task(&c, p, data, len); },
            [&] { return "room in " + p->name + "'s window, or its read"; }, -1, false, &now);
    });
}

ssize_t cordma_recv(cordma_context* ctx, int peer, void* data, size_t max_len) {
    return c_entry<ssize_t>("cordma_recv", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        check_buffer(data, max_len, "data");
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        auto now = [&] { return recv_now(*p, data, max_len); };
        std::size_t got = run_call(
            c, [&] { return recv_task(&c, p, data, max_len); }, [&] { return "a message from " + p->name; }, -1,
            false, &now);
        return static_cast<ssize_t>(got);
    });
}

ssize_t cordma_peek(cordma_context* ctx, int peer) {
    return c_entry<ssize_t>("cordma_peek", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        std::size_t size = run_call(c, [&] { return peek_task(&c, p); }, [&] { return "a message from " + p->name; });
        return static_cast<ssize_t>(size);
    });
}

int cordma_broadcast(cordma_context* ctx, const void* data, size_t len) {
    return c_entry<int>("cordma_broadcast", "", -1, [&] {
        auto& c = checked_context(ctx);
        check_buffer(data, len, "data");
        auto lock = lock_call(c);
        return run_call(c, [&] { return broadcast_task(&c, data, len); }, "the peers to take the message");
    });
}

}  // extern "C"
