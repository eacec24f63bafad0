// The C API's collectives over a context's connected peers: all-to-all
// (sequential or pairwise), all-gather and barrier. Slot i of a buffer
// belongs to peer i (cordma.h documents the layouts).
#include <cerrno>
#include <functional>

#include <cordma/cordma.h>
#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"
#include "c_api/c_frames.hpp"

using namespace cordma::detail::c_api;
namespace wire = cordma::detail::link_wire;

namespace {

constexpr frame_kind all_to_all_kind{all_to_all_op, 0};
constexpr frame_kind all_gather_kind{all_gather_op, 0};
constexpr frame_kind arrival_kind{barrier_op, 1};
constexpr frame_kind release_kind{barrier_op, 2};

/// One peer's part: send `out` (length bytes at out_offset) and take the
/// peer's frame of the same kind into `in` at in_offset, both at once (a
/// large send waits for the peer to read it, which it does while taking
/// ours).
cordma::task<void> exchange(std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* out,
                            std::size_t out_offset, user_buffer* in, std::size_t in_offset, std::size_t length,
                            std::stop_token token, const char* call) {
    std::exception_ptr send_error;
    std::exception_ptr take_error;
    auto sending = [](std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* out, std::size_t offset,
                      std::size_t length, std::stop_token token, const char* call,
                      std::exception_ptr* error) -> cordma::task<void> {
        try {
            co_await send_frame(p, kind, out, offset, length, token, call);
        } catch (...) {
            *error = std::current_exception();
        }
    };
    auto taking = [](std::shared_ptr<peer_state> p, frame_kind kind, user_buffer* in, std::size_t offset,
                     std::size_t length, std::stop_token token, const char* call,
                     std::exception_ptr* error) -> cordma::task<void> {
        try {
            std::size_t got = co_await take_frame(p, kind, in, offset, length, true, token, call);
            (void)got;
        } catch (...) {
            *error = std::current_exception();
        }
    };
    std::uint32_t before = p->link->frames_sent();
    cordma::task_group both;
    both.spawn(sending(p, kind, out, out_offset, length, token, call, &send_error));
    both.spawn(taking(p, kind, in, in_offset, length, token, call, &take_error));
    co_await both.join();
    auto cancelled = [](const std::exception_ptr& e) {
        if (!e)
            return false;
        try {
            std::rethrow_exception(e);
        } catch (const cordma::operation_cancelled&) {
            return true;
        } catch (...) {
            return false;
        }
    };
    // Given up halfway (the deadline) with one side of the exchange done:
    // the peer's next frames and ours no longer pair up.
    if ((cancelled(send_error) || cancelled(take_error)) &&
        (!send_error || !take_error || p->link->frames_sent() != before) && p->usable)
        p->fail_out_of_step(call);
    if (send_error)
        std::rethrow_exception(send_error);
    if (take_error)
        std::rethrow_exception(take_error);
}

void check_collective(cordma_context* ctx, const void* send_buf, const void* recv_buf, std::size_t msg_size) {
    checked_context(ctx);
    if (send_buf == nullptr && msg_size != 0)
        throw c_failure(EINVAL, "send_buf is NULL");
    if (recv_buf == nullptr && msg_size != 0)
        throw c_failure(EINVAL, "recv_buf is NULL");
}

cordma::task<int> all_to_all_task(cordma_context* ctx, const void* send_buf, void* recv_buf, std::size_t msg_size,
                                  bool pairwise) {
    std::size_t slots = static_cast<std::size_t>(cordma_peer_count(ctx));
    user_buffer out(ctx->builder, send_buf, slots * msg_size, cordma::access_flags::remote_read, true);
    user_buffer in(ctx->builder, recv_buf, slots * msg_size, cordma::access_flags::local_write, true);
    auto token = call_token(*ctx);
    // Named, not temporaries: g++ 12 destroys some temporaries of a
    // co_await expression twice (this stop_token among them).
    auto peers = connected_peers(*ctx);
    std::function<cordma::task<void>(std::shared_ptr<peer_state>)> work = [&out, &in, msg_size, token](std::shared_ptr<peer_state> p) {
        std::size_t at = static_cast<std::size_t>(p->index) * msg_size;
        return exchange(std::move(p), all_to_all_kind, &out, at, &in, at, msg_size, token, "cordma_alltoall");
    };
    co_await for_each_peer(std::move(peers), pairwise, std::move(work));
    co_return 0;
}

cordma::task<int> all_gather_task(cordma_context* ctx, const void* send_buf, void* recv_buf, std::size_t msg_size) {
    std::size_t slots = static_cast<std::size_t>(cordma_peer_count(ctx));
    user_buffer out(ctx->builder, send_buf, msg_size, cordma::access_flags::remote_read, true);
    user_buffer in(ctx->builder, recv_buf, slots * msg_size, cordma::access_flags::local_write, true);
    auto token = call_token(*ctx);
    auto peers = connected_peers(*ctx);
    std::function<cordma::task<void>(std::shared_ptr<peer_state>)> work = [&out, &in, msg_size, token](std::shared_ptr<peer_state> p) {
        std::size_t at = static_cast<std::size_t>(p->index) * msg_size;
        return exchange(std::move(p), all_gather_kind, &out, 0, &in, at, msg_size, token, "cordma_allgather");
    };
    co_await for_each_peer(std::move(peers), true, std::move(work));
    co_return 0;
}

cordma::task<int> barrier_task(cordma_context* ctx) {
    user_buffer none(ctx->builder, nullptr, 0, cordma::access_flags::remote_read, true);
    auto token = call_token(*ctx);
    auto peers = connected_peers(*ctx);
    const frame_kind rounds[] = {arrival_kind, release_kind};
    for (frame_kind round : rounds) {
        std::function<cordma::task<void>(std::shared_ptr<peer_state>)> work = [&none, round, token](std::shared_ptr<peer_state> p) {
            return exchange(std::move(p), round, &none, 0, &none, 0, 0, token, "cordma_barrier");
        };
        auto these = peers;
        co_await for_each_peer(std::move(these), true, std::move(work));
    }
    co_return 0;
}

}  // namespace

extern "C" {

int cordma_alltoall(cordma_context* ctx, const void* send_buf, void* recv_buf, size_t msg_size, cordma_order order) {
    return c_entry<int>("cordma_alltoall", "", -1, [&] {
        check_collective(ctx, send_buf, recv_buf, msg_size);
        long long order_value = c_enum_value(order);
        if (order_value != CORDMA_ORDER_SEQUENTIAL && order_value != CORDMA_ORDER_PAIRWISE)
            throw c_failure(EINVAL, "order is " + std::to_string(order_value) +
                                        "; it must be CORDMA_ORDER_SEQUENTIAL or CORDMA_ORDER_PAIRWISE");
        auto lock = lock_call(*ctx);
        return run_call(
            *ctx, [&] { return all_to_all_task(ctx, send_buf, recv_buf, msg_size, order == CORDMA_ORDER_PAIRWISE); },
            "the peers' all-to-all");
    });
}

int cordma_allgather(cordma_context* ctx, const void* send_buf, void* recv_buf, size_t msg_size) {
    return c_entry<int>("cordma_allgather", "", -1, [&] {
        check_collective(ctx, send_buf, recv_buf, msg_size);
        auto lock = lock_call(*ctx);
        return run_call(*ctx, [&] { return all_gather_task(ctx, send_buf, recv_buf, msg_size); }, "the peers' all-gather");
    });
}

int cordma_barrier(cordma_context* ctx) {
    return c_entry<int>("cordma_barrier", "", -1, [&] {
        checked_context(ctx);
        auto lock = lock_call(*ctx);
        return run_call(*ctx, [&] { return barrier_task(ctx); }, "the peers' barrier");
    });
}

}  // extern "C"
