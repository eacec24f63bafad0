// rdma_lib's all-to-all (rdma_sequential_alltoall in rdma_lib.h): the
// star's messages gathered by the server, joined as text as rdma_lib
// joins them, and sent back to every client.
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <cordma/rdma_lib.h>

#include "c_api/c_call.hpp"
#include "c_api/c_context.hpp"

using namespace cordma::detail::c_api;

namespace {

/// rdma_lib's text of one message: up to its first NUL, at most msg_size.
std::string text_of(const char* msg, std::size_t msg_size) { return std::string(msg, ::strnlen(msg, msg_size)); }

/// Fails with the reason cordma_last_error already holds, under this name.
[[noreturn]] void pass_on(const char* what) {
    throw c_failure(cordma_last_errno(), std::string(what) + ": " + cordma_last_error());
}

}  // namespace

extern "C" int cordma_rdma_lib_alltoall(cordma_context* ctx, const void* send_buf, void* recv_buf, size_t msg_size) {
    return c_entry<int>("rdma_sequential_alltoall", "", -1, [&] {
        auto& c = checked_context(ctx);
        if (send_buf == nullptr || recv_buf == nullptr || msg_size == 0)
            throw c_failure(EINVAL, "send_buf or recv_buf is NULL, or msg_size is 0");
        const char* mine = static_cast<const char*>(send_buf);
        char* out = static_cast<char*>(recv_buf);
        auto peers = connected_peers(c);
        if (peers.empty())
            throw c_failure(ENOTCONN, "no connected peer: accept clients (server) or connect to the server first");
        if (!c.incoming) {
            // A client: its message to the server, the joined text back.
            if (peers.size() != 1)
                throw c_failure(EINVAL, "a client context (not listening) has " + std::to_string(peers.size()) +
                                            " peers; rdma_lib's all-to-all runs on a star, one server per client");
            int server = peers.front()->index;
            if (cordma_send(ctx, server, mine, msg_size) < 0)
                pass_on("sending this client's message");
            ssize_t got = cordma_recv(ctx, server, out, BUFFER_SIZE);
            if (got < 0)
                pass_on("receiving the joined messages");
            out[got > 0 ? got - 1 : 0] = '\0';
            return 0;
        }
        // The server: each client's message, in peer order, one at a time.
        std::string joined = text_of(mine, msg_size);
        std::vector<char> slot(msg_size + 1);
        for (auto& p : peers) {
            ssize_t got = cordma_recv(ctx, p->index, slot.data(), msg_size);
            if (got < 0)
                pass_on(("receiving " + p->name + "'s message").c_str());
            slot[static_cast<std::size_t>(got)] = '\0';
            joined += "; " + text_of(slot.data(), static_cast<std::size_t>(got));
        }
        joined += ";";
        if (joined.size() > BUFFER_SIZE - 1)
            joined.resize(BUFFER_SIZE - 1);
        for (auto& p : peers)
            if (cordma_send(ctx, p->index, joined.c_str(), joined.size() + 1) < 0)
                pass_on(("sending the joined messages to " + p->name).c_str());
        std::memcpy(out, joined.c_str(), joined.size() + 1);
        return 0;
    });
}
