/** \file
 * cordma's C API: RDMA for C programs, without verbs and without C++.
 *
 *     cordma_config config;
 *     cordma_config_init(&config);
 *     config.address = "10.0.0.1";        // the local RDMA address
 *     config.port = 5555;                 // listen here...
 *     config.listen = true;               // ...for peers to accept
 *     cordma_context *ctx = cordma_create(&config);
 *     int peer = cordma_accept(ctx);      // or cordma_connect(ctx, "10.0.0.2", 5555)
 *     cordma_send(ctx, peer, "hello", 6);
 *     cordma_destroy(ctx);
 *
 * Compile with `gcc -std=c11 prog.c $(pkg-config --cflags --libs cordma)`.
 *
 * The model. A context owns an RDMA device, a thread that waits for its
 * completions, and connections to peers. Peers are numbered 0, 1, 2, ...
 * in the order this context connected or accepted them, and keep their
 * number for the context's life: cordma_disconnect does not renumber the
 * others, and a disconnected peer's number is never reused.
 *
 * Every call is synchronous: it returns once done (what it sent may be
 * reused, what it received has landed). Underneath, cordma's coroutines
 * run on the context's thread while the calling thread sleeps (event
 * polling), or on the calling thread, which runs the context's loop while
 * it waits (busy and yielding polling: no thread switch per call).
 *
 * Errors. A call that fails returns -1 (or NULL), sets errno, and leaves a
 * message in cordma_last_error(), per thread, naming the call, the peer and
 * the reason (e.g. "cordma_recv(peer 1, 10.0.0.3:40512): the peer went
 * away: its connection closed"). No C++ exception crosses this API. A
 * failure that concerns one peer (it disconnected, died, stopped
 * answering, or broke the protocol) closes that peer only: calls naming
 * it fail at once from then on (errno ENOTCONN), the others go on.
 * Invalid arguments (EINVAL) and a message too large for the receive
 * buffer (EMSGSIZE) lose nothing: the call can be made again.
 *
 * Deadlines. Every wait ends: a call finishes, fails because a peer it
 * waits for went away (a closed or broken connection is seen at once; a
 * host that powered off is seen when it leaves `peer_timeout_ms` of pings
 * unanswered), or runs out its `timeout_ms` (ETIMEDOUT; 0 means no
 * deadline, like a blocking socket).
 *
 * Threads. A context may be used from any thread, but one call at a time:
 * calls from several threads on one context run one after another. Use a
 * context per thread for parallel traffic. A call on a context from the
 * thread that runs that context's loop (a log sink called during a call
 * on it) fails with EDEADLK, and cordma_destroy then frees nothing: it
 * would wait for itself.
 *
 * Messages. cordma_send and cordma_recv carry messages: one send, one
 * receive, boundaries kept, in order per peer, of any size. A message up to
 * `buffer_size` bytes is copied into a buffer the receiver keeps posted
 * (one SEND); a larger one is not copied at all: the receiver RDMA-READs
 * it straight from the sender's memory into its own buffer. Sends never
 * overrun the receiver: each peer grants `window` messages in flight and a
 * sender waits for room.
 *
 * Collectives (cordma_broadcast, cordma_alltoall, cordma_allgather,
 * cordma_barrier) work on this context's connected peers: every peer must
 * make the matching call, in the same order as its other calls with this
 * context. A peer whose next message does not match the call (it sent a
 * plain message, or called another collective, or used another size) makes
 * the call fail with EPROTO naming both sides; nothing is lost.
 */
#ifndef CORDMA_CORDMA_H
#define CORDMA_CORDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CORDMA_C_API __attribute__((visibility("default")))
#else
#define CORDMA_C_API
#endif

/** A context: a device, its thread, and the peers. Opaque. */
typedef struct cordma_context cordma_context;

/** How two contexts agree on their queue pairs. */
typedef enum cordma_exchange {
    /** librdmacm; the port is an rdma_cm port (its own space, not TCP's). */
    CORDMA_EXCHANGE_RDMA_CM = 0,
    /** A TCP connection carries the endpoints, and tells each side when
     *  the other goes away; the port is a TCP port. */
    CORDMA_EXCHANGE_TCP = 1
} cordma_exchange;

/** How the context's thread waits for completions. */
typedef enum cordma_polling {
    /** Sleeps until the device signals (no CPU while idle). */
    CORDMA_POLLING_EVENT = 0,
    /** Spins (lowest latency, a core per context): the calling thread
     *  during a call, the context's thread between calls. */
    CORDMA_POLLING_BUSY = 1,
    /** Spins, yielding the CPU between passes (for more threads than cores). */
    CORDMA_POLLING_YIELDING = 2,
    /** Spins as BUSY does while there is work, and sleeps until the
     *  device signals after 100 us without any: the calling thread during
     *  a call (the context's thread waits for the device on its behalf),
     *  the context's thread between calls. A ping-pong costs no wake-up;
     *  an idle context no CPU. */
    CORDMA_POLLING_ADAPTIVE = 3
} cordma_polling;

/** The order of an all-to-all. */
typedef enum cordma_order {
    /** One peer at a time in peer order: exchange with peer 0 (send its
     *  slot, receive its slot), then peer 1, ... rdma_lib's order: the least
     *  memory and network pressure. */
    CORDMA_ORDER_SEQUENTIAL = 0,
    /** Every peer's exchange at once, overlapped: the fastest. */
    CORDMA_ORDER_PAIRWISE = 1
} cordma_order;

/** What a peer may do to memory this context grants it (cordma_grant). */
enum {
    CORDMA_ACCESS_READ = 1,  /**< the peer may RDMA-READ it */
    CORDMA_ACCESS_WRITE = 2  /**< the peer may RDMA-WRITE it */
};

/** A context's settings. Start from cordma_config_init(): a later version
 *  may add fields, which it then sets to their defaults. */
typedef struct cordma_config {
    /** This host's address on the RDMA network (IPv4 or IPv6, or a host
     *  name): the device is the one whose network interface has it. NULL or
     *  "" for the first device with an active port. Default NULL. */
    const char *address;
    /** With `listen`: the port to accept peers on (0: any free one, see
     *  cordma_local_port). A context that does not listen has no port of
     *  its own: anything but 0 is refused. Default 0. */
    int port;
    /** Accept peers (cordma_accept) on `address`:`port`. Default false. */
    bool listen;
    /** The largest message this context receives into a posted buffer
     *  (bytes, 64 to 1 MiB); larger ones go zero-copy by RDMA READ. Not a
     *  limit on the message size. Each side tells the other its own at
     *  connect time and sends inline up to the peer's, so the two ends
     *  may differ. Default 4096. */
    size_t buffer_size;
    /** Messages a peer may have in flight to this context before its sends
     *  wait (2 to 60). Default 16. */
    int window;
    /** The deadline of every call that waits, in milliseconds; 0 for none.
     *  Default 0. */
    int timeout_ms;
    /** How long cordma_connect retries a refused connection (nothing
     *  listening yet) and waits for the handshake, in milliseconds
     *  (positive). Default 10000. */
    int connect_timeout_ms;
    /** A peer that leaves pings unanswered this long, while a call waits
     *  on it, is taken for dead (its host powered off or unreachable), in
     *  milliseconds (at least 1000). Default 10000. */
    int peer_timeout_ms;
    /** Default CORDMA_EXCHANGE_RDMA_CM. Both ends must use the same. */
    cordma_exchange exchange;
    /** Default CORDMA_POLLING_EVENT. */
    cordma_polling polling;
} cordma_config;

/** Fills `config` with the defaults above. */
CORDMA_C_API void cordma_config_init(cordma_config *config);

/** Opens the device, starts the context's thread and, with `listen`,
 *  listens. Returns NULL on failure (no device, no such address, the port
 *  in use, a setting out of range: the message names it). */
CORDMA_C_API cordma_context *cordma_create(const cordma_config *config);

/** Closes every connection (peers see their calls fail as the connection
 *  closes), stops the thread and frees everything, even after failures.
 *  Waits for messages already sent to leave. NULL is ignored. */
CORDMA_C_API void cordma_destroy(cordma_context *ctx);

/** Connects to the context listening at `host`:`port`. Returns the new
 *  peer's number, or -1 (ECONNREFUSED when nothing listened within
 *  connect_timeout_ms, ETIMEDOUT, EHOSTUNREACH, EPROTO for a listener that
 *  is not a cordma C context). */
CORDMA_C_API int cordma_connect(cordma_context *ctx, const char *host, int port);

/** Waits for the next peer to connect (the context must listen) and
 *  returns its number, or -1 (EINVAL: not listening; ETIMEDOUT). The
 *  context takes clients' connections as they come, before any
 *  cordma_accept, and holds up to 64 (their receives posted), its listener
 *  256 more; past those a client is refused, saying the backlog is full,
 *  and retries until its connect_timeout_ms. Each cordma_accept takes the
 *  oldest and answers its hello: the client's cordma_connect returns then,
 *  so it waits for that accept within its connect_timeout_ms. */
CORDMA_C_API int cordma_accept(cordma_context *ctx);

/** Closes the connection to `peer` (the peer's calls naming this context
 *  fail with ENOTCONN). Its number stays taken. Returns 0, or -1 for a bad
 *  number (EINVAL); disconnecting a peer twice is not an error. */
CORDMA_C_API int cordma_disconnect(cordma_context *ctx, int peer);

/** Peers numbered so far (connected or not). -1 for a NULL context. */
CORDMA_C_API int cordma_peer_count(const cordma_context *ctx);
/** Whether `peer` is connected: 1 yes, 0 no (disconnected, or its
 *  connection failed), -1 for a bad number. */
CORDMA_C_API int cordma_peer_connected(const cordma_context *ctx, int peer);
/** "host:port" of `peer`, valid until cordma_destroy; NULL for a bad
 *  number. */
CORDMA_C_API const char *cordma_peer_address(const cordma_context *ctx, int peer);
/** The port the context listens on (useful with port 0), or -1. */
CORDMA_C_API int cordma_local_port(const cordma_context *ctx);

/** Sends `len` bytes (0 is allowed; `data` may then be NULL) as one
 *  message to `peer`. Returns once `data` may be reused: at once for a
 *  copied message, after the peer has read it for a larger one (which thus
 *  waits for the peer's cordma_recv). Waits for room in the peer's window.
 *  Returns 0, or -1. */
CORDMA_C_API int cordma_send(cordma_context *ctx, int peer, const void *data, size_t len);

/** Receives the next message from `peer` into `data` and returns its
 *  length. A message longer than `max_len` is not taken: -1 with EMSGSIZE
 *  and the message says its size; the next call with a large enough buffer
 *  gets it (cordma_peek tells the size first). */
CORDMA_C_API ssize_t cordma_recv(cordma_context *ctx, int peer, void *data, size_t max_len);

/** Waits for the next message from `peer` and returns its length without
 *  taking it. -1 with EPROTO if the next thing the peer sent is a
 *  collective's, not a message. */
CORDMA_C_API ssize_t cordma_peek(cordma_context *ctx, int peer);

/** Sends the same message to every connected peer at once (they take it
 *  with cordma_recv). Returns 0, or -1 naming every peer that failed (errno
 *  of the first); the others have the message. */
CORDMA_C_API int cordma_broadcast(cordma_context *ctx, const void *data, size_t len);

/** All-to-all with the connected peers: each contributes one `msg_size`
 *  slot per peer and gets one back.
 *
 *  `send_buf` and `recv_buf` hold cordma_peer_count(ctx) slots of
 *  `msg_size` bytes, slot i for peer i (in the order peers were connected
 *  or accepted): slot i of send_buf goes to peer i, and slot i of recv_buf
 *  receives what peer i sent this context (its slot for this context). The
 *  slots of disconnected peers are neither sent nor written.
 *
 *  A star: a server that accepted N clients exchanges a slot with each
 *  (N slots each way); a client has one peer, the server, so it sends its
 *  slot 0 to the server and receives the server's slot for it into its
 *  slot 0: clients do not hear from each other (relay through the server
 *  with cordma_send/cordma_recv, or see rdma_lib.h's all-to-all).
 *
 *  Every connected peer must call cordma_alltoall with the same msg_size.
 *  `order` is this side's schedule (CORDMA_ORDER_SEQUENTIAL or _PAIRWISE);
 *  the two may differ across peers. Returns 0, or -1 naming the first peer
 *  that failed. */
CORDMA_C_API int cordma_alltoall(cordma_context *ctx, const void *send_buf, void *recv_buf, size_t msg_size,
                                 cordma_order order);

/** All-gather with the connected peers: each contributes one `msg_size`
 *  message and gets every peer's. `recv_buf` holds cordma_peer_count(ctx)
 *  slots: slot i receives peer i's message (this context's own is not
 *  copied). Disconnected peers' slots are not written. A client of a star
 *  gets the server's message only. Every connected peer must call it with
 *  the same msg_size. Returns 0, or -1. */
CORDMA_C_API int cordma_allgather(cordma_context *ctx, const void *send_buf, void *recv_buf, size_t msg_size);

/** Waits until every connected peer has called cordma_barrier, in two
 *  rounds: this context tells every peer it arrived and waits for each
 *  peer's arrival, then tells every peer to go and waits for each peer's
 *  go. In a star (or a full mesh) no participant leaves before every
 *  participant has arrived. Returns 0, or -1. */
CORDMA_C_API int cordma_barrier(cordma_context *ctx);

/** A region of a peer's memory this context may access (cordma_accept_grant). */
typedef struct cordma_remote {
    int peer;        /**< whose memory */
    uint64_t size;   /**< bytes granted */
    unsigned access; /**< CORDMA_ACCESS_READ | CORDMA_ACCESS_WRITE, as granted */
    uint64_t id;     /**< cordma's number for the grant (for messages) */
} cordma_remote;

/** Registers `buf` (`len` bytes, which must stay valid) and grants `peer`
 *  `access` (CORDMA_ACCESS_READ and/or _WRITE) to it until cordma_revoke or
 *  cordma_destroy. The peer takes the grant with cordma_accept_grant.
 *  Returns 0, or -1. */
CORDMA_C_API int cordma_grant(cordma_context *ctx, int peer, void *buf, size_t len, unsigned access);

/** Ends every grant of `buf` (to any peer) and deregisters it. Returns how
 *  many grants ended, or -1. The peers are told by message: an access that
 *  crosses it fails in the hardware and closes that peer's connection, so
 *  revoke once the peers are done (see cordma_grant_ended). */
CORDMA_C_API int cordma_revoke(cordma_context *ctx, void *buf);

/** Takes the next grant `peer` made with cordma_grant into `*remote`.
 *  Returns 0, or -1. */
CORDMA_C_API int cordma_accept_grant(cordma_context *ctx, int peer, cordma_remote *remote);

/** RDMA-WRITEs `len` bytes from `src` to `offset` in the granted region
 *  (the peer's CPU is not involved). -1 with EINVAL outside the region or
 *  without write access, EACCES if the peer revoked it. */
CORDMA_C_API int cordma_write(cordma_context *ctx, const cordma_remote *remote, uint64_t offset, const void *src,
                              size_t len);

/** RDMA-READs `len` bytes at `offset` of the granted region into `dst`.
 *  -1 with EINVAL outside the region or without read access, EACCES if the
 *  peer revoked it. */
CORDMA_C_API int cordma_read(cordma_context *ctx, const cordma_remote *remote, uint64_t offset, void *dst,
                             size_t len);

/** Whether the owner has ended the grant (cordma_revoke, or its context
 *  went) and this side has heard of it: 1 yes, 0 not yet, -1 for a bad
 *  argument. The owner's word travels as a message, so just after a
 *  revoke this may still say 0; an access then is refused by the hardware,
 *  which closes the connection. A program that revokes while its peer may
 *  still access tells the peer first, or the peer waits for this to say 1. */
CORDMA_C_API int cordma_grant_ended(cordma_context *ctx, const cordma_remote *remote);

/** Lets go of a grant taken with cordma_accept_grant (the owner is told).
 *  Returns 0, or -1. */
CORDMA_C_API int cordma_release(cordma_context *ctx, cordma_remote *remote);

/** The renderings cordma_metrics writes (docs/observability.md). */
typedef enum cordma_metrics_format {
    CORDMA_METRICS_JSON = 0,       /**< one JSON object, every counter by name */
    CORDMA_METRICS_PROMETHEUS = 1  /**< Prometheus' text exposition format 0.0.4 */
} cordma_metrics_format;

/** What every connection of `ctx` counted (operations by kind, bytes,
 *  completions by status, doorbells; docs/observability.md), rendered as
 *  `format`. As snprintf: writes at most `len` bytes into `buf`, always
 *  terminated when `len` > 0 (`buf` may be NULL when `len` is 0), and
 *  returns the length of the whole text (without its terminator), so a
 *  return of `len` or more means it was cut: call again with a larger
 *  buffer. Any thread, at any time. Returns -1 (EINVAL) for a NULL context
 *  or an unknown format. */
CORDMA_C_API ssize_t cordma_metrics(const cordma_context *ctx, cordma_metrics_format format, char *buf, size_t len);

/** Trace context: every message and collective frame this context sends
 *  from now on carries `trace_id`, 16 bytes (W3C Trace Context's trace-id,
 *  as cordma/trace.hpp's trace_id), so one request can be followed across
 *  processes; the peer reads it with cordma_last_trace (a C++ peer as the
 *  frame's trace). NULL, or 16 zero bytes, stops it: frames go untraced,
 *  byte for byte as before. A traced frame is 16 bytes longer; a peer whose
 *  cordma predates trace ids gets its frames without. Returns 0, or -1
 *  (EINVAL) for a NULL context. */
CORDMA_C_API int cordma_set_trace(cordma_context *ctx, const unsigned char *trace_id);
/** The trace id carried by the last message or collective frame this side
 *  received whole from `peer` (cordma_recv, a collective), copied to
 *  trace_id[0..15]: returns 1 if it carried one, 0 if it carried none (or
 *  nothing was received yet; trace_id is zeroed), -1 on error (EINVAL: a
 *  NULL context or trace_id, or no such peer). A call like the others: it
 *  waits for a call running on the context from another thread. */
CORDMA_C_API int cordma_last_trace(cordma_context *ctx, int peer, unsigned char *trace_id);

/** The message of this thread's last failed call ("" if none failed yet).
 *  Valid until this thread's next cordma call. */
CORDMA_C_API const char *cordma_last_error(void);
/** The errno value of this thread's last failed call (0 if none). */
CORDMA_C_API int cordma_last_errno(void);

/** How much a log line matters, least first (cordma/log.hpp's log_level).
 *  Debug: connections set up; info: connections ended; warning (the
 *  default level): a peer that broke a protocol or a refused client, closed
 *  while everything else goes on; error: cordma itself failed. */
typedef enum cordma_log_level {
    CORDMA_LOG_DEBUG = 0,
    CORDMA_LOG_INFO = 1,
    CORDMA_LOG_WARNING = 2,
    CORDMA_LOG_ERROR = 3,
    CORDMA_LOG_OFF = 4 /**< as a level: nothing is logged */
} cordma_log_level;

/** Receives each log line that passes the level: its level, its text (no
 *  trailing newline, valid only during the call) and the `user` pointer
 *  given to cordma_set_log_sink. Called on whichever thread logs, often a
 *  context's own thread and sometimes several at once: it must be
 *  thread-safe and quick. It may call cordma (but a call on the context
 *  whose loop logged the line fails with EDEADLK); a line cordma logs
 *  meanwhile on the same thread goes to stderr. */
typedef void (*cordma_log_sink)(cordma_log_level level, const char *line, void *user);

/** Sends cordma's log lines to `sink` (with `user`) from now on; NULL
 *  restores the default, one line each on stderr. By default lines at
 *  CORDMA_LOG_WARNING and above are written; the environment variable
 *  CORDMA_LOG (debug, info, warning, error or off) sets another level.
 *  Any thread, any time: when it returns, the previous sink is running on
 *  no other thread and is never called again. Returns 0, or -1 (ENOMEM). */
CORDMA_C_API int cordma_set_log_sink(cordma_log_sink sink, void *user);

/** Lets lines at `level` and above through from now on; CORDMA_LOG_OFF
 *  silences cordma. Overrides CORDMA_LOG. Returns 0, or -1 (EINVAL) for a
 *  value that is not a cordma_log_level. */
CORDMA_C_API int cordma_set_log_level(cordma_log_level level);

#ifdef __cplusplus
}
#endif

#endif /* CORDMA_CORDMA_H */
