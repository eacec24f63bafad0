// The C API's memory grants: a context registers a buffer of its own and
// grants a peer access to it through the connection's memory-region agent
// (cordma_grant, cordma_revoke); the peer takes the grant
// (cordma_accept_grant) and RDMA-writes or reads it (cordma_write,
// cordma_read) without the owner's CPU, until it lets go (cordma_release).
#include <cerrno>
#include <cstring>

#include <cordma/cordma.h>
#include <cordma/error.hpp>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"
#include "c_api/c_frames.hpp"

using namespace cordma::detail::c_api;
using cordma::access_flags;

namespace {

/// Grants last until revoked or the context goes: the agent's longest lease.
constexpr std::chrono::milliseconds grant_lease = c_grant_lease;  // c_context.hpp
/// Up to this size a write's source or a read's target is copied through
/// the pool's registered memory; above it the caller's buffer is
/// registered for the transfer.
constexpr std::size_t copy_limit = 64 * 1024;

cordma::agent_call agent_call_of(cordma_context& ctx) {
    return cordma::agent_call{cordma::agent_call::forever, call_token(ctx)};
}

access_flags access_flags_of(unsigned access) {
    access_flags flags = access_flags::none;
    if (access & CORDMA_ACCESS_READ)
        flags = flags | access_flags::remote_read;
    if (access & CORDMA_ACCESS_WRITE)
        flags = flags | access_flags::remote_write;
    return flags;
}

unsigned access_of(access_flags flags) {
    unsigned access = 0;
    if (cordma::contains(flags, access_flags::remote_read))
        access |= CORDMA_ACCESS_READ;
    if (cordma::contains(flags, access_flags::remote_write))
        access |= CORDMA_ACCESS_WRITE;
    return access;
}

cordma::task<int> grant_task(cordma_context* ctx, std::shared_ptr<peer_state> p, void* buf, std::size_t len,
                             unsigned access) {
    access_flags flags = access_flags_of(access);
    access_flags registration = flags;
    if (access & CORDMA_ACCESS_WRITE)
        registration = registration | access_flags::local_write;
    cordma::local_mr mr = cordma::register_local_mr(ctx->builder.pd(), buf, len, registration);
    cordma::local_slice region = mr.all();
    cordma::agent_call call = agent_call_of(*ctx);
    co_await p->conn.send_local_mr(region, grant_lease, flags, call);
    ctx->granted.emplace(buf, std::move(mr));
    co_return 0;
}

cordma::task<int> revoke_task(cordma_context* ctx, void* buf) {
    std::size_t ended = 0;
    auto [first, last] = ctx->granted.equal_range(buf);
    for (auto it = first; it != last; ++it)
        for (auto& p : connected_peers(*ctx)) {
            cordma::local_slice region = it->second.all();
            std::size_t n = co_await p->conn.revoke_local_mr(region);
            ended += n;
        }
    ctx->granted.erase(buf);
    co_return static_cast<int>(ended);
}

cordma::task<int> accept_grant_task(cordma_context* ctx, std::shared_ptr<peer_state> p, cordma_remote* remote) {
    cordma::agent_call call = agent_call_of(*ctx);
    cordma::remote_mr region = co_await p->conn.receive_remote_mr(call);
    remote->peer = p->index;
    remote->size = region.size();
    remote->access = access_of(region.access());
    remote->id = region.id();
    p->grants.emplace(region.id(), std::move(region));
    co_return 0;
}

/// The grant `remote` names, checked for [offset, offset + len) and `need`.
cordma::remote_mr& grant_of(cordma_context& ctx, const cordma_remote* remote, std::uint64_t offset, std::size_t len,
                            unsigned need, std::shared_ptr<peer_state>& p) {
    if (remote == nullptr)
        throw c_failure(EINVAL, "remote is NULL: take a grant with cordma_accept_grant");
    p = peer_handle(ctx, remote->peer);
    p->check_usable();
    auto it = p->grants.find(remote->id);
    if (it == p->grants.end())
        throw c_failure(EINVAL, "grant " + std::to_string(remote->id) + " of " + p->name +
                                    " is not held: released already, or not taken with cordma_accept_grant");
    cordma::remote_mr& region = it->second;
    if (offset > region.size() || len > region.size() - offset)
        throw c_failure(EINVAL, "bytes " + std::to_string(offset) + " to " + std::to_string(offset + len) +
                                    " are outside the grant's " + std::to_string(region.size()) + " bytes");
    if ((access_of(region.access()) & need) != need)
        throw c_failure(EINVAL, std::string("the grant does not allow ") +
                                    (need == CORDMA_ACCESS_WRITE ? "writes" : "reads") +
                                    " (the owner granted " + std::to_string(access_of(region.access())) +
                                    ": CORDMA_ACCESS_READ is 1, _WRITE 2)");
    if (region.expired())
        throw c_failure(EACCES, "the owner ended the grant (cordma_revoke, or its context went)");
    return region;
}

cordma::task<int> write_task(cordma_context* ctx, std::shared_ptr<peer_state> p, cordma::remote_slice target,
                             const void* src, std::size_t len) {
    auto token = call_token(*ctx);
    if (len <= copy_limit) {
        cordma::local_mr staging = ctx->builder.pool()->allocate(len);
        std::memcpy(staging.data(), src, len);
        cordma::local_slice source = staging.all();
        co_await p->conn.write(source, target, token);
    } else {
        user_buffer buf(ctx->builder, src, len, access_flags::none, false);
        cordma::local_slice source = buf.registered(0, len);
        co_await p->conn.write(source, target, token);
    }
    co_return 0;
}

cordma::task<int> read_task(cordma_context* ctx, std::shared_ptr<peer_state> p, cordma::remote_slice source,
                            void* dst, std::size_t len) {
    auto token = call_token(*ctx);
    if (len <= copy_limit) {
        cordma::local_mr staging = ctx->builder.pool()->allocate(len);
        cordma::local_slice target = staging.all();
        co_await p->conn.read(target, source, token);
        std::memcpy(dst, staging.data(), len);
    } else {
        user_buffer buf(ctx->builder, dst, len, access_flags::local_write, false);
        cordma::local_slice target = buf.registered(0, len);
        co_await p->conn.read(target, source, token);
    }
    co_return 0;
}

/// Whether the owner ended grant `id` (the grants live on the event
/// listener thread: asked there).
cordma::task<int> grant_ended_task(std::shared_ptr<peer_state> p, std::uint64_t id) {
    auto it = p->grants.find(id);
    if (it == p->grants.end())
        throw c_failure(EINVAL, "grant " + std::to_string(id) + " of " + p->name + " is not held");
    co_return it->second.expired() ? 1 : 0;
}

/// Drops the remote_mr, which tells the owner (on the listener thread).
cordma::task<int> release_task(std::shared_ptr<peer_state> p, std::uint64_t id) {
    auto it = p->grants.find(id);
    if (it == p->grants.end())
        throw c_failure(EINVAL, "grant " + std::to_string(id) + " of " + p->name + " is not held");
    p->grants.erase(it);
    co_return 0;
}

/// cordma_write and cordma_read: the arguments and the grant checked, then
/// the transfer `make` builds, run as the context's call.
template <class Make>
int one_sided(const char* call, cordma_context* ctx, const cordma_remote* remote, std::uint64_t offset,
              std::size_t len, const void* buffer, const char* buffer_name, unsigned need, Make make) noexcept {
    return c_entry<int>(call, call_subject::of(remote ? ctx : nullptr, remote ? remote->peer : 0), -1, [&] {
        auto& c = checked_context(ctx);
        if (buffer == nullptr && len != 0)
            throw c_failure(EINVAL, std::string(buffer_name) + " is NULL");
        auto lock = lock_call(c);
        std::shared_ptr<peer_state> p;
        cordma::remote_mr& region = grant_of(c, remote, offset, len, need, p);
        if (len == 0)
            return 0;
        return run_call(c, [&] { return make(c, p, region.slice(offset, len)); },
                        need == CORDMA_ACCESS_WRITE ? "the write to complete" : "the read to complete");
    });
}

}  // namespace

extern "C" {

int cordma_grant(cordma_context* ctx, int peer, void* buf, size_t len, unsigned access) {
    return c_entry<int>("cordma_grant", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        if (buf == nullptr || len == 0)
            throw c_failure(EINVAL, "buf is NULL or len is 0: grant a buffer of at least one byte");
        if (access == 0 || (access & ~unsigned(CORDMA_ACCESS_READ | CORDMA_ACCESS_WRITE)) != 0)
            throw c_failure(EINVAL, "access is " + std::to_string(access) +
                                        "; it must be CORDMA_ACCESS_READ, CORDMA_ACCESS_WRITE or both");
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        return run_call(
            c, [&] { return grant_task(&c, p, buf, len, access); }, [&] { return "the grant to reach " + p->name; });
    });
}

int cordma_revoke(cordma_context* ctx, void* buf) {
    return c_entry<int>("cordma_revoke", "", -1, [&] {
        auto& c = checked_context(ctx);
        auto lock = lock_call(c);
        if (c.granted.find(buf) == c.granted.end())
            throw c_failure(EINVAL, "no grant of this buffer (cordma_grant it first; revoke names the buffer granted)");
        return run_call(c, [&] { return revoke_task(&c, buf); }, "the peers to be told");
    });
}

int cordma_accept_grant(cordma_context* ctx, int peer, cordma_remote* remote) {
    return c_entry<int>("cordma_accept_grant", call_subject::of(ctx, peer), -1, [&] {
        auto& c = checked_context(ctx);
        if (remote == nullptr)
            throw c_failure(EINVAL, "remote is NULL: pass a cordma_remote to fill");
        auto lock = lock_call(c);
        auto p = peer_handle(c, peer);
        p->check_usable();
        return run_call(
            c, [&] { return accept_grant_task(&c, p, remote); }, [&] { return "a grant from " + p->name; });
    });
}

int cordma_write(cordma_context* ctx, const cordma_remote* remote, uint64_t offset, const void* src, size_t len) {
    return one_sided("cordma_write", ctx, remote, offset, len, src, "src", CORDMA_ACCESS_WRITE,
                     [&](cordma_context& c, std::shared_ptr<peer_state> p, cordma::remote_slice target) {
                         return write_task(&c, std::move(p), target, src, len);
                     });
}

int cordma_read(cordma_context* ctx, const cordma_remote* remote, uint64_t offset, void* dst, size_t len) {
    return one_sided("cordma_read", ctx, remote, offset, len, dst, "dst", CORDMA_ACCESS_READ,
                     [&](cordma_context& c, std::shared_ptr<peer_state> p, cordma::remote_slice source) {
                         return read_task(&c, std::move(p), source, dst, len);
                     });
}

int cordma_grant_ended(cordma_context* ctx, const cordma_remote* remote) {
    return c_entry<int>("cordma_grant_ended", call_subject::of(remote ? ctx : nullptr, remote ? remote->peer : 0), -1, [&] {
        auto& c = checked_context(ctx);
        if (remote == nullptr)
            throw c_failure(EINVAL, "remote is NULL");
        auto lock = lock_call(c);
        auto p = peer_handle(c, remote->peer);
        return run_call(c, [&] { return grant_ended_task(p, remote->id); }, "the grant's state");
    });
}

int cordma_release(cordma_context* ctx, cordma_remote* remote) {
    return c_entry<int>("cordma_release", call_subject::of(remote ? ctx : nullptr, remote ? remote->peer : 0), -1, [&] {
        auto& c = checked_context(ctx);
        if (remote == nullptr)
            throw c_failure(EINVAL, "remote is NULL");
        auto lock = lock_call(c);
        auto p = peer_handle(c, remote->peer);
        int rc = run_call(c, [&] { return release_task(p, remote->id); }, "the release");
        remote->id = 0;
        remote->size = 0;
        return rc;
    });
}

}  // extern "C"
