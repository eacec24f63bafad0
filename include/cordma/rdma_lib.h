/** \file
 * rdma_lib's interface on cordma: programs written for rdma_lib (a small C
 * RDMA library: rdma_init, rdma_accept_peer, rdma_send, ...) compile
 * unchanged against cordma and behave as rdma_lib documents:
 *
 *     gcc -std=c11 prog.c $(pkg-config --cflags --libs cordma)
 *
 * finds this header as "rdma_lib.h" too (cordma.pc adds its compat folder
 * to the include path). Every function maps onto cordma's C API
 * (cordma.h), with its guarantees: messages of any size (BUFFER_SIZE is
 * the default size of the buffers messages are copied into, not a limit;
 * larger ones go zero-copy), calls naming a peer that went away fail at
 * once instead of blocking, rdma_cleanup frees everything after any
 * failure, and rdma_get_error() says which call failed, for which peer,
 * and why (per thread).
 *
 * Differences worth knowing:
 * - rdma_recv returns the length of the message received (rdma_lib
 *   returned max_len); a message longer than max_len fails without being
 *   lost (see cordma_recv).
 * - rdma_init's port matters to servers only (it is where they listen);
 *   `ip` picks the device whose interface has that address.
 * - Connections use rdma_cm, not rdma_lib's own TCP exchange: a cordma
 *   program talks to cordma programs, not to rdma_lib ones.
 */
#ifndef CORDMA_RDMA_LIB_H
#define CORDMA_RDMA_LIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <cordma/cordma.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rdma_lib's constants. MAX_PEERS, MAX_WR and CQ_DEPTH are not limits in
   cordma (peers, work requests and completion queues grow as needed). */
/** rdma_lib's peer limit; kept for programs that size arrays with it
 *  (cordma has no limit on peers). */
#define MAX_PEERS 64
/** rdma_lib's work requests per queue pair; not a limit in cordma. */
#define MAX_WR 128
/** rdma_lib's completion queue depth; not a limit in cordma. */
#define CQ_DEPTH 256
/** The default size of the buffers small messages are copied into (what
 *  rdma_lib programs pass to rdma_init), and the size of the text an
 *  all-to-all joins. Messages may be larger: they then go zero-copy. */
#define BUFFER_SIZE 4096

/** rdma_lib's context is cordma's: an rdma_context* may be passed to the
 *  cordma_* functions too. */
typedef cordma_context rdma_context;

/** rdma_lib's all-to-all: a star's all-gather through the server, joined
 *  as text. The server (a context that listens) receives one message of
 *  at most `msg_size` bytes from each connected client, in peer order,
 *  joins its own and theirs as text ("server; client0; client1;": each
 *  message up to its first NUL, at most msg_size bytes, the whole at most
 *  BUFFER_SIZE - 1 characters and NUL-terminated), sends that to every
 *  client and copies it into `recv_buf`. A client (one peer, the server)
 *  sends its message and receives the joined text into `recv_buf`, which
 *  must hold BUFFER_SIZE bytes, as in rdma_lib. Returns 0, or -1. For
 *  binary data, see cordma_alltoall and cordma_allgather. */
CORDMA_C_API int cordma_rdma_lib_alltoall(cordma_context *ctx, const void *send_buf, void *recv_buf,
                                          size_t msg_size);

/** A context listening on ip:port (servers) or ready to connect (clients);
 *  buf_size is the size of the buffers small messages are copied into
 *  (64 B to 1 MiB). NULL on failure. */
static inline rdma_context *rdma_init(const char *ip, int port, size_t buf_size, bool is_server) {
    cordma_config config;
    cordma_config_init(&config);
    config.address = ip;
    config.port = is_server ? port : 0;
    config.listen = is_server;
    config.buffer_size = buf_size;
    return cordma_create(&config);
}

/** Closes every connection and frees the context (NULL is fine), after any
 *  failure too (cordma_destroy). */
static inline void rdma_cleanup(rdma_context *ctx) { cordma_destroy(ctx); }

/** Returns the new peer's index, or -1. */
static inline int rdma_connect_peer(rdma_context *ctx, const char *peer_ip, int peer_port) {
    return cordma_connect(ctx, peer_ip, peer_port);
}

/** Waits for the next client; returns its index, or -1. */
static inline int rdma_accept_peer(rdma_context *ctx) { return cordma_accept(ctx); }

/** Closes the connection to peer `peer_idx`; the other peers keep their
 *  indexes. Returns 0, or -1 for a bad index (cordma_disconnect). */
static inline int rdma_disconnect_peer(rdma_context *ctx, int peer_idx) { return cordma_disconnect(ctx, peer_idx); }

/** Returns len (at most INT_MAX), or -1. */
static inline int rdma_send(rdma_context *ctx, int peer_idx, const void *data, size_t len) {
    if (cordma_send(ctx, peer_idx, data, len) < 0)
        return -1;
    return len > (size_t)INT_MAX ? INT_MAX : (int)len;
}

/** Returns the length of the message received, or -1. */
static inline int rdma_recv(rdma_context *ctx, int peer_idx, void *data, size_t max_len) {
    ssize_t got = cordma_recv(ctx, peer_idx, data, max_len);
    if (got < 0)
        return -1;
    return got > (ssize_t)INT_MAX ? INT_MAX : (int)got;
}

/** Sends data to every connected peer; returns len (at most INT_MAX), or -1. */
static inline int rdma_broadcast(rdma_context *ctx, const void *data, size_t len) {
    if (cordma_broadcast(ctx, data, len) < 0)
        return -1;
    return len > (size_t)INT_MAX ? INT_MAX : (int)len;
}

/** rdma_lib's all-to-all, as cordma_rdma_lib_alltoall describes: the
 *  server gathers every client's message and all receive them joined as
 *  text. Returns 0, or -1. */
static inline int rdma_sequential_alltoall(rdma_context *ctx, const void *send_buf, void *recv_buf,
                                           size_t msg_size) {
    return cordma_rdma_lib_alltoall(ctx, send_buf, recv_buf, msg_size);
}

/** This thread's last error message, naming the call, the peer and the
 *  reason ("" before any failure); valid until this thread's next call
 *  (cordma_last_error). */
static inline const char *rdma_get_error(void) { return cordma_last_error(); }

#ifdef __cplusplus
}
#endif

#endif /* CORDMA_RDMA_LIB_H */
