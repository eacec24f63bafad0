// The C API's messages: cordma_send, cordma_recv, cordma_peek and
// cordma_broadcast (a send to every connected peer at once).
#include <cerrno>
#include <functional>
#include <stop_token>

#include <cordma/cordma.h>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"
#include "c_api/c_frames.hpp"

using namespace cordma::detail::c_api;
namespace wire = cordma::detail::link_wire;

namespace {

constexpr frame_kind message_kind{wire::op::message, 0};

void check_buffer(const void* data, std::size_t len, const char* name) {
    if (data == nullptr && len != 0)
        throw c_failure(EINVAL, std::string(name) + " is NULL but its length is " + std::to_string(len) + " bytes");
}

cordma::task<int> send_task(cordma_context* ctx, std::shared_ptr<peer_state> p, const void* data, std::size_t len) {
    user_buffer buf(ctx->builder.pd(), data, len, cordma::access_flags::remote_read, false);
    std::stop_token token = call_token(*ctx);
    co_await send_frame(p, message_kind, &buf, 0, len, token, "cordma_send");
    co_return 0;
}

cordma::task<std::size_t> recv_task(cordma_context* ctx, std::shared_ptr<peer_state> p, void* data,
                                    std::size_t max_len) {
    user_buffer buf(ctx->builder.pd(), data, max_len, cordma::access_flags::local_write, false);
    std::stop_token token = call_token(*ctx);
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
    user_buffer buf(ctx->builder.pd(), data, len, cordma::access_flags::remote_read, true);
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
        return run_call(
            c, [&] { return send_task(&c, p, data, len); },
            [&] { return "room in " + p->name + "'s window, or its read"; });
    });
}

ssize_t cordma_recv(cordma_context* ctx, int peer, void* data, size_t max_len) {
    return c_entry<ssize_t>("cordma_recv", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        check_buffer(data, max_len, "data");
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        std::size_t got = run_call(
            c, [&] { return recv_task(&c, p, data, max_len); }, [&] { return "a message from " + p->name; });
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
