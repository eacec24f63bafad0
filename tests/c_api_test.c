/*
 * c_api_test: cordma's C API (cordma.h, and rdma_lib.h's all-to-all) from a
 * plain C11 program, the way C users call it: no Catch2, no C++.
 *
 * Every function in cordma.h is called with real bytes and every byte that
 * arrives is checked. Contexts live in one process: a server context that
 * listens on the test address (port 0, then cordma_local_port) and client
 * contexts that connect to it. A context runs one call at a time, so each
 * blocking call that must overlap another runs on its own thread (struct op
 * below) and is joined; every context has timeout_ms set, so no call can
 * hang, and every join is bounded too.
 *
 * A CHECK prints file:line, the expression and the last cordma error (of the
 * thread that made the call) when it fails, counts, and the program goes
 * on; it exits non-zero if any check failed and ends with "N checks passed".
 *
 * The address: RXE_VM_ADDR inside tools/rxe-vm, CORDMA_TEST_ADDR on a host
 * with an RDMA device. Without either it fails, never skips.
 * CORDMA_C_API_ONLY=TEXT runs only the sections whose name has TEXT, e.g.
 *   tools/rxe-vm -t 120 -- sh -c 'cd build && CORDMA_C_API_ONLY=grants meson test c_api'
 * (meson test c_api builds it against the installed cordma with pkg-config:
 * tests/c_api_installed.sh). Run as `c_api_test --child PORT` it is the peer
 * process of "killed process".
 */
#define _GNU_SOURCE
#include <cordma/cordma.h>
#include <cordma/rdma_lib.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- checks ------------------------------------------------------------ */

static atomic_int checks_passed;
static atomic_int checks_failed;

static void check_failed(const char *file, int line, const char *expr, const char *error, int err) {
    atomic_fetch_add(&checks_failed, 1);
    fprintf(stderr, "%s:%d: CHECK(%s) failed; cordma_last_error(): \"%s\" (errno %d: %s)\n", file, line, expr,
            error ? error : "(null)", err, strerror(err));
}

/* Checks `expr`; on failure prints this thread's last cordma error. */
#define CHECK(expr)                                                                                    \
    ((expr) ? (void)atomic_fetch_add(&checks_passed, 1)                                                \
            : check_failed(__FILE__, __LINE__, #expr, cordma_last_error(), cordma_last_errno()))

/* Checks `expr` about an op run on another thread: prints that thread's error. */
#define CHECK_OP(o, expr)                                                                              \
    ((expr) ? (void)atomic_fetch_add(&checks_passed, 1)                                                \
            : check_failed(__FILE__, __LINE__, #expr, (o)->msg, (o)->err))

static int summary(void) {
    int passed = atomic_load(&checks_passed), failed = atomic_load(&checks_failed);
    if (failed)
        printf("c_api_test: %d checks FAILED, %d passed\n", failed, passed);
    printf("%d checks passed\n", passed);
    return failed ? 1 : 0;
}

/* A check the rest cannot do without (a context that was not created). */
#define REQUIRE(expr)                                                                                  \
    do {                                                                                               \
        bool required_ = (expr); /* evaluated once: it may create a thread */                          \
        if (required_)                                                                                 \
            atomic_fetch_add(&checks_passed, 1);                                                       \
        else                                                                                           \
            check_failed(__FILE__, __LINE__, #expr, cordma_last_error(), cordma_last_errno());         \
        if (!required_) {                                                                              \
            fprintf(stderr, "%s:%d: cannot go on without it\n", __FILE__, __LINE__);                   \
            summary();                                                                                 \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static bool has(const char *text, const char *part) { return text && strstr(text, part); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A deliberate pause: lets another thread get into its blocking call first
   (when it does not, the check still holds, it just tests less). */
static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* ---- byte patterns -------------------------------------------------------
 * Each buffer is filled from a tag (below 128): byte i is
 * tag + i * (2 * tag + 1) + i / 256. Distinct tags differ at byte 0 and in
 * stride, so a slot holding another sender's bytes, or bytes shifted,
 * truncated or left over, never passes. */

static uint8_t pattern_byte(unsigned tag, size_t i) {
    return (uint8_t)(tag + i * (2 * tag + 1) + (i >> 8));
}

static void fill(void *buf, size_t len, unsigned tag) {
    uint8_t *p = buf;
    for (size_t i = 0; i < len; ++i)
        p[i] = pattern_byte(tag, i);
}

/* Whether buf holds tag's pattern; says where it does not. */
static bool pattern_ok(const char *what, const void *buf, size_t len, unsigned tag) {
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; ++i) {
        if (p[i] != pattern_byte(tag, i)) {
            fprintf(stderr, "  %s: byte %zu of %zu is %u, expected %u (tag %u)\n", what, i, len, p[i],
                    pattern_byte(tag, i), tag);
            return false;
        }
    }
    return true;
}

/* Whether every byte of buf is `value` (memory a call must not write). */
static bool all_bytes(const void *buf, size_t len, uint8_t value) {
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; ++i)
        if (p[i] != value)
            return false;
    return true;
}

static void *xmalloc(size_t len) {
    void *p = malloc(len ? len : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", len);
        exit(1);
    }
    return p;
}

/* ---- calls on their own thread ------------------------------------------ */

typedef enum op_kind {
    OP_ACCEPT,
    OP_SEND,
    OP_RECV,
    OP_ALLTOALL,
    OP_ALLGATHER,
    OP_BARRIER,
    OP_GRANT,
    OP_RDMA_LIB_ALLTOALL
} op_kind;

/* One cordma call made on a thread of its own: the inputs, then what it
   returned, its errno and message (cordma_last_error is per thread), and
   when it started and finished. */
typedef struct op {
    op_kind kind;
    cordma_context *ctx;
    int peer;
    const void *src;
    void *dst;
    size_t len; /* bytes to send, max_len, or the slot size */
    cordma_order order;
    unsigned access;
    long delay_ms;       /* pause before the call */
    atomic_int *arrived; /* OP_BARRIER: incremented before, read after */

    long long ret;
    int err;
    int arrived_after; /* OP_BARRIER: *arrived when the barrier returned */
    char msg[512];
    double started, finished;
    pthread_t thread;
} op;

static void *op_main(void *arg) {
    op *o = arg;
    if (o->delay_ms)
        pause_ms(o->delay_ms);
    if (o->arrived)
        atomic_fetch_add(o->arrived, 1);
    o->started = now();
    switch (o->kind) {
    case OP_ACCEPT: o->ret = cordma_accept(o->ctx); break;
    case OP_SEND: o->ret = cordma_send(o->ctx, o->peer, o->src, o->len); break;
    case OP_RECV: o->ret = cordma_recv(o->ctx, o->peer, o->dst, o->len); break;
    case OP_ALLTOALL: o->ret = cordma_alltoall(o->ctx, o->src, o->dst, o->len, o->order); break;
    case OP_ALLGATHER: o->ret = cordma_allgather(o->ctx, o->src, o->dst, o->len); break;
    case OP_BARRIER: o->ret = cordma_barrier(o->ctx); break;
    case OP_GRANT: o->ret = cordma_grant(o->ctx, o->peer, o->dst, o->len, o->access); break;
    case OP_RDMA_LIB_ALLTOALL: o->ret = cordma_rdma_lib_alltoall(o->ctx, o->src, o->dst, o->len); break;
    }
    o->finished = now();
    if (o->arrived)
        o->arrived_after = atomic_load(o->arrived);
    o->err = o->ret < 0 ? cordma_last_errno() : 0;
    snprintf(o->msg, sizeof o->msg, "%s", o->ret < 0 ? cordma_last_error() : "");
    return NULL;
}

static void op_start(op *o) {
    if (pthread_create(&o->thread, NULL, op_main, o) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(1);
    }
}

/* Joins the op's thread. Every context has a deadline (timeout_ms), so a
   call that is still running after 90 s is a bug: say so and stop. */
static void op_wait(op *o) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 90;
    int rc = pthread_timedjoin_np(o->thread, NULL, &deadline);
    if (rc != 0) {
        fprintf(stderr, "c_api_test: a call (op kind %d, peer %d) did not return within 90 s although every "
                        "context has timeout_ms set; stopping\n",
                (int)o->kind, o->peer);
        summary();
        abort();
    }
}

/* ---- contexts ------------------------------------------------------------ */

static const char *test_addr;
enum { TIMEOUT_MS = 20000 };

/* A configuration on the test address with a 20 s deadline on every call. */
static cordma_config test_config(bool listen) {
    cordma_config c;
    cordma_config_init(&c);
    c.address = test_addr;
    c.port = 0;
    c.listen = listen;
    c.timeout_ms = TIMEOUT_MS;
    return c;
}

static cordma_context *create_or_die(const cordma_config *c) {
    cordma_context *ctx = cordma_create(c);
    REQUIRE(ctx != NULL);
    return ctx;
}

/* Connects `client` to the listening `server` (which accepts on a thread),
   checks both sides' numbers and returns the server's number for it. */
static int join(cordma_context *server, cordma_context *client, int expected_at_server) {
    /* Asked before the accept starts: calls on a context take turns. */
    int port = cordma_local_port(server);
    op acc = {.kind = OP_ACCEPT, .ctx = server};
    op_start(&acc);
    int before = cordma_peer_count(client);
    int at_client = cordma_connect(client, test_addr, port);
    CHECK(at_client == before);
    op_wait(&acc);
    CHECK_OP(&acc, acc.ret == expected_at_server);
    return (int)acc.ret;
}

/* Sends `len` bytes of tag's pattern from (from, from_peer) and receives
   them at (to, to_peer), on two threads; checks every byte. */
static void transfer(cordma_context *from, int from_peer, cordma_context *to, int to_peer, size_t len, unsigned tag) {
    uint8_t *out = xmalloc(len), *in = xmalloc(len + 64);
    fill(out, len, tag);
    memset(in, 0xEE, len + 64);
    op s = {.kind = OP_SEND, .ctx = from, .peer = from_peer, .src = len ? out : NULL, .len = len};
    op r = {.kind = OP_RECV, .ctx = to, .peer = to_peer, .dst = in, .len = len + 64};
    op_start(&s);
    op_start(&r);
    op_wait(&s);
    op_wait(&r);
    CHECK_OP(&s, s.ret == 0);
    CHECK_OP(&r, r.ret == (long long)len);
    char what[64];
    snprintf(what, sizeof what, "message of %zu bytes", len);
    CHECK(pattern_ok(what, in, len, tag));
    CHECK(all_bytes(in + len, 64, 0xEE)); /* nothing written past the message */
    free(out);
    free(in);
}

/* ---- 1. settings ----------------------------------------------------------- */

static void test_config_defaults(void) {
    /* Before any failure this thread has no error. */
    CHECK(strcmp(cordma_last_error(), "") == 0);
    CHECK(cordma_last_errno() == 0);

    cordma_config c;
    memset(&c, 0x5A, sizeof c);
    cordma_config_init(&c);
    CHECK(c.address == NULL);
    CHECK(c.port == 0);
    CHECK(c.listen == false);
    CHECK(c.buffer_size == 4096);
    CHECK(c.window == 16);
    CHECK(c.timeout_ms == 0);
    CHECK(c.connect_timeout_ms == 10000);
    CHECK(c.peer_timeout_ms == 10000);
    CHECK(c.exchange == CORDMA_EXCHANGE_RDMA_CM);
    CHECK(c.polling == CORDMA_POLLING_EVENT);
}

/* cordma_create with `c` must fail naming `field`. */
static void create_fails(const cordma_config *c, const char *field) {
    errno = 0;
    cordma_context *ctx = cordma_create(c);
    CHECK(ctx == NULL);
    CHECK(errno != 0);
    CHECK(cordma_last_errno() == errno);
    CHECK(has(cordma_last_error(), field));
    if (!has(cordma_last_error(), field))
        fprintf(stderr, "  (expected the message to name '%s')\n", field);
    cordma_destroy(ctx);
}

static void test_create(void) {
    cordma_config c = test_config(false);
    c.buffer_size = 10;
    create_fails(&c, "buffer_size");
    CHECK(cordma_last_errno() == EINVAL);
    c.buffer_size = 63;
    create_fails(&c, "buffer_size");
    c.buffer_size = (1u << 20) + 1;
    create_fails(&c, "buffer_size");

    c = test_config(false);
    c.window = 1;
    create_fails(&c, "window");
    CHECK(cordma_last_errno() == EINVAL);
    c.window = 61;
    create_fails(&c, "window");

    c = test_config(false);
    c.timeout_ms = -1;
    create_fails(&c, "timeout_ms");
    c = test_config(false);
    c.connect_timeout_ms = 0;
    create_fails(&c, "connect_timeout_ms");
    c = test_config(false);
    c.peer_timeout_ms = 999;
    create_fails(&c, "peer_timeout_ms");
    c = test_config(false);
    c.exchange = (cordma_exchange)7;
    create_fails(&c, "exchange");
    c = test_config(false);
    c.polling = (cordma_polling)9;
    create_fails(&c, "polling");
    c = test_config(true);
    c.port = 70000;
    create_fails(&c, "port");
    c = test_config(false);
    c.port = 5555; /* a port that would do nothing without listen */
    create_fails(&c, "listen is false");

    /* An address no interface here has (TEST-NET-1, never routed). */
    c = test_config(true);
    c.address = "192.0.2.1";
    create_fails(&c, "192.0.2.1");

    CHECK(cordma_create(NULL) == NULL);
    CHECK(cordma_last_errno() == EINVAL);

    /* The limits themselves are accepted. */
    c = test_config(false);
    c.buffer_size = 64;
    c.window = 2;
    cordma_context *low = cordma_create(&c);
    CHECK(low != NULL);
    c.buffer_size = 1u << 20;
    c.window = 60;
    cordma_context *high = cordma_create(&c);
    CHECK(high != NULL);
    CHECK(cordma_local_port(low) == -1); /* not listening */
    CHECK(cordma_peer_count(low) == 0);
    cordma_destroy(low);
    cordma_destroy(high);

    /* A port in use. */
    c = test_config(true);
    cordma_context *first = create_or_die(&c);
    int port = cordma_local_port(first);
    CHECK(port > 0 && port < 65536);
    c.port = port;
    cordma_context *second = cordma_create(&c);
    CHECK(second == NULL);
    char text[16];
    snprintf(text, sizeof text, "%d", port);
    CHECK(has(cordma_last_error(), text));
    cordma_destroy(second);
    cordma_destroy(first);
}

/* The error state is per thread: a new thread has none. */
static void *fresh_thread_errors(void *arg) {
    int *ok = arg;
    *ok = strcmp(cordma_last_error(), "") == 0 && cordma_last_errno() == 0;
    return NULL;
}

static void test_errors_per_thread(void) {
    CHECK(cordma_send(NULL, 0, "x", 1) == -1); /* this thread now has an error */
    CHECK(strcmp(cordma_last_error(), "") != 0);
    int ok = 0;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, fresh_thread_errors, &ok) == 0);
    pthread_join(t, NULL);
    CHECK(ok == 1);
}

/* Every call given a NULL context fails with EINVAL naming itself. */
static void test_null_context(void) {
    char buf[8] = {0};
    cordma_remote remote = {0};
#define NULL_CTX(call, name)                                                                           \
    do {                                                                                               \
        errno = 0;                                                                                     \
        CHECK((call) == -1);                                                                           \
        CHECK(errno == EINVAL);                                                                        \
        CHECK(cordma_last_errno() == EINVAL);                                                          \
        CHECK(has(cordma_last_error(), name));                                                         \
    } while (0)
    NULL_CTX(cordma_connect(NULL, test_addr, 1), "cordma_connect");
    NULL_CTX(cordma_accept(NULL), "cordma_accept");
    NULL_CTX(cordma_disconnect(NULL, 0), "cordma_disconnect");
    NULL_CTX(cordma_send(NULL, 0, buf, 1), "cordma_send");
    NULL_CTX(cordma_recv(NULL, 0, buf, sizeof buf), "cordma_recv");
    NULL_CTX(cordma_peek(NULL, 0), "cordma_peek");
    NULL_CTX(cordma_broadcast(NULL, buf, 1), "cordma_broadcast");
    NULL_CTX(cordma_alltoall(NULL, buf, buf, 1, CORDMA_ORDER_SEQUENTIAL), "cordma_alltoall");
    NULL_CTX(cordma_allgather(NULL, buf, buf, 1), "cordma_allgather");
    NULL_CTX(cordma_barrier(NULL), "cordma_barrier");
    NULL_CTX(cordma_grant(NULL, 0, buf, sizeof buf, CORDMA_ACCESS_READ), "cordma_grant");
    NULL_CTX(cordma_revoke(NULL, buf), "cordma_revoke");
    NULL_CTX(cordma_accept_grant(NULL, 0, &remote), "cordma_accept_grant");
    NULL_CTX(cordma_write(NULL, &remote, 0, buf, 1), "cordma_write");
    NULL_CTX(cordma_read(NULL, &remote, 0, buf, 1), "cordma_read");
    NULL_CTX(cordma_grant_ended(NULL, &remote), "cordma_grant_ended");
    NULL_CTX(cordma_release(NULL, &remote), "cordma_release");
    NULL_CTX(cordma_set_trace(NULL, NULL), "cordma_set_trace");
    NULL_CTX(cordma_last_trace(NULL, 0, (unsigned char *)buf), "cordma_last_trace");
#undef NULL_CTX
    CHECK(cordma_peer_count(NULL) == -1);
    CHECK(cordma_peer_connected(NULL, 0) == -1);
    CHECK(cordma_peer_address(NULL, 0) == NULL);
    CHECK(cordma_local_port(NULL) == -1);
    cordma_destroy(NULL); /* ignored */
}

/* ---- 2. the star: a server and two clients -------------------------------- */

typedef struct star {
    cordma_context *server, *c1, *c2;
    int port;
} star;

static void test_connect(star *s) {
    cordma_config c = test_config(true);
    s->server = create_or_die(&c);
    c = test_config(false);
    s->c1 = create_or_die(&c);
    s->c2 = create_or_die(&c);
    s->port = cordma_local_port(s->server);
    CHECK(s->port > 0 && s->port < 65536);

    /* Accepting on a context that does not listen. */
    errno = 0;
    CHECK(cordma_accept(s->c1) == -1);
    CHECK(errno == EINVAL);
    CHECK(has(cordma_last_error(), "cordma_accept"));

    CHECK(cordma_peer_count(s->server) == 0);
    CHECK(join(s->server, s->c1, 0) == 0);
    CHECK(join(s->server, s->c2, 1) == 1);

    CHECK(cordma_peer_count(s->server) == 2);
    CHECK(cordma_peer_count(s->c1) == 1);
    CHECK(cordma_peer_count(s->c2) == 1);
    CHECK(cordma_peer_connected(s->server, 0) == 1);
    CHECK(cordma_peer_connected(s->server, 1) == 1);
    CHECK(cordma_peer_connected(s->server, 2) == -1);
    CHECK(cordma_peer_connected(s->server, -1) == -1);
    CHECK(cordma_peer_connected(s->c1, 0) == 1);
    CHECK(cordma_local_port(s->c1) == -1);

    /* A client's peer is the server, at the address and port it listens on. */
    char expected[128];
    snprintf(expected, sizeof expected, "%s:%d", test_addr, s->port);
    const char *a = cordma_peer_address(s->c1, 0);
    CHECK(a && strcmp(a, expected) == 0);
    if (a && strcmp(a, expected) != 0)
        fprintf(stderr, "  peer_address(c1, 0) is \"%s\", expected \"%s\"\n", a, expected);
    /* The server's peers are the clients, at the test address. */
    snprintf(expected, sizeof expected, "%s:", test_addr);
    const char *p0 = cordma_peer_address(s->server, 0), *p1 = cordma_peer_address(s->server, 1);
    CHECK(p0 && strncmp(p0, expected, strlen(expected)) == 0 && atoi(p0 + strlen(expected)) > 0);
    CHECK(p1 && strncmp(p1, expected, strlen(expected)) == 0 && atoi(p1 + strlen(expected)) > 0);
    CHECK(p0 && p1 && strcmp(p0, p1) != 0);
    CHECK(cordma_peer_address(s->server, 2) == NULL);
    CHECK(cordma_peer_address(s->server, -1) == NULL);

    /* Peer numbers follow the accept order: peer 0 is c1, peer 1 is c2. */
    transfer(s->c1, 0, s->server, 0, 5, 1);
    transfer(s->c2, 0, s->server, 1, 5, 2);
}

static void test_messages(star *s) {
    const size_t bs = 4096; /* the default buffer_size */
    const size_t sizes[] = {0, 1, bs - 1, bs, bs + 1, 4u << 20};
    unsigned tag = 10;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        transfer(s->c1, 0, s->server, 0, sizes[i], tag++);
        transfer(s->server, 0, s->c1, 0, sizes[i], tag++);
        transfer(s->server, 1, s->c2, 0, sizes[i], tag++);
    }

    /* A zero-length message with no buffer at all, both ends. */
    op snd = {.kind = OP_SEND, .ctx = s->c2, .peer = 0, .src = NULL, .len = 0};
    op_start(&snd);
    CHECK(cordma_recv(s->server, 1, NULL, 0) == 0);
    op_wait(&snd);
    CHECK_OP(&snd, snd.ret == 0);

    /* Several in flight, in order, boundaries kept. */
    uint8_t out[8][300], in[300];
    for (int m = 0; m < 8; ++m) {
        fill(out[m], sizeof out[m], 40 + (unsigned)m);
        CHECK(cordma_send(s->c1, 0, out[m], 100 + (size_t)m * 25) == 0);
    }
    for (int m = 0; m < 8; ++m) {
        ssize_t got = cordma_recv(s->server, 0, in, sizeof in);
        CHECK(got == 100 + m * 25);
        CHECK(pattern_ok("queued message", in, (size_t)(100 + m * 25), 40 + (unsigned)m));
    }
}

/* cordma_set_trace and cordma_last_trace: a trace id set on one side
 * arrives with every message after it, small (in the link's slots) and
 * large (read from the sender's memory), and with a broadcast; cleared, the
 * next message carries none. */
static void test_trace(star *s) {
    const unsigned char a[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
    const unsigned char b[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    unsigned char got[16];
    /* Nothing taken with a trace yet: 0, and the bytes zeroed. */
    memset(got, 0xAA, sizeof got);
    CHECK(cordma_last_trace(s->server, 0, got) == 0);
    CHECK(all_bytes(got, sizeof got, 0));

    CHECK(cordma_set_trace(s->c1, a) == 0);
    const size_t sizes[] = {10, 4u << 20};
    for (size_t i = 0; i < 2; ++i) {
        transfer(s->c1, 0, s->server, 0, sizes[i], 90 + (unsigned)i);
        memset(got, 0, sizeof got);
        CHECK(cordma_last_trace(s->server, 0, got) == 1);
        CHECK(memcmp(got, a, sizeof a) == 0);
    }
    /* The other client's messages carry none. */
    transfer(s->c2, 0, s->server, 1, 10, 92);
    CHECK(cordma_last_trace(s->server, 1, got) == 0);
    /* Cleared (NULL): untraced again. */
    CHECK(cordma_set_trace(s->c1, NULL) == 0);
    transfer(s->c1, 0, s->server, 0, 10, 93);
    CHECK(cordma_last_trace(s->server, 0, got) == 0);
    CHECK(all_bytes(got, sizeof got, 0));

    /* The server's broadcast under trace b reaches both clients with it. */
    CHECK(cordma_set_trace(s->server, b) == 0);
    uint8_t out[64], in[64];
    fill(out, sizeof out, 94);
    op r1 = {.kind = OP_RECV, .ctx = s->c1, .peer = 0, .dst = in, .len = sizeof in};
    op_start(&r1);
    CHECK(cordma_broadcast(s->server, out, sizeof out) == 0);
    op_wait(&r1);
    CHECK_OP(&r1, r1.ret == (long long)sizeof out);
    CHECK(cordma_recv(s->c2, 0, in, sizeof in) == (ssize_t)sizeof out);
    for (int c = 0; c < 2; ++c) {
        memset(got, 0, sizeof got);
        CHECK(cordma_last_trace(c == 0 ? s->c1 : s->c2, 0, got) == 1);
        CHECK(memcmp(got, b, sizeof b) == 0);
    }
    /* All zero is "none", as NULL is. */
    const unsigned char zero[16] = {0};
    CHECK(cordma_set_trace(s->server, zero) == 0);
    transfer(s->server, 0, s->c1, 0, 10, 95);
    CHECK(cordma_last_trace(s->c1, 0, got) == 0);

    /* Bad arguments: named, nothing changed. */
    errno = 0;
    CHECK(cordma_last_trace(s->server, 0, NULL) == -1);
    CHECK(cordma_last_errno() == EINVAL);
    CHECK(has(cordma_last_error(), "cordma_last_trace") && has(cordma_last_error(), "trace_id"));
    CHECK(cordma_last_trace(s->server, 7, got) == -1);
    CHECK(cordma_last_errno() == EINVAL);
    CHECK(cordma_set_trace(NULL, a) == -1);
    CHECK(cordma_last_errno() == EINVAL);
}

/* The whole rendering, `first` bytes long when last asked. The counters
 * are live (a link's keepalive, a latency's digits): the text may grow
 * between two calls, and then the call says so by returning more than the
 * buffer held, as snprintf does; asked again until it fits. */
static char *render_whole(const cordma_context *ctx, cordma_metrics_format format, ssize_t first, ssize_t *length) {
    ssize_t want = first, got = -1;
    char *text = NULL;
    for (int tries = 0; tries < 5 && got != want; ++tries) {
        if (got > want)
            want = got;
        free(text);
        text = xmalloc((size_t)want + 1);
        got = cordma_metrics(ctx, format, text, (size_t)want + 1);
        CHECK(got > 0);
        if (got > 0 && got < want)
            want = got; /* shorter now: all of it is in */
    }
    CHECK(got == want);
    *length = got;
    return text;
}

/* cordma_metrics after the messages above: both renderings, the
   server's receives counted, snprintf's contract for a short buffer, and
   clear refusals. */
static void test_metrics(star *s) {
    ssize_t n = cordma_metrics(s->server, CORDMA_METRICS_JSON, NULL, 0);
    CHECK(n > 0);
    if (n <= 0)
        return;
    char *json = render_whole(s->server, CORDMA_METRICS_JSON, n, &n);
    CHECK(strlen(json) == (size_t)n);
    unsigned long long qps = 0, posted = 0, completed = 0;
    const char *at = strstr(json, "\"queue_pairs\": ");
    CHECK(at != NULL && sscanf(at, "\"queue_pairs\": %llu", &qps) == 1);
    CHECK(qps >= 2); /* two clients, each at least a data queue pair */
    at = strstr(json, "\"recv\": {\"posted\": ");
    CHECK(at != NULL && sscanf(at, "\"recv\": {\"posted\": %llu, \"completed\": %llu", &posted, &completed) == 2);
    CHECK(completed > 0);
    CHECK(posted >= completed);
    free(json);

    ssize_t p = cordma_metrics(s->server, CORDMA_METRICS_PROMETHEUS, NULL, 0);
    CHECK(p > 0);
    char small[16];
    memset(small, 'x', sizeof small);
    CHECK(cordma_metrics(s->server, CORDMA_METRICS_PROMETHEUS, small, sizeof small) >= (ssize_t)sizeof small);
    CHECK(strlen(small) == sizeof small - 1);
    ssize_t got = 0;
    char *page = render_whole(s->server, CORDMA_METRICS_PROMETHEUS, p, &got);
    CHECK(strlen(page) == (size_t)got);
    CHECK(strstr(page, "# TYPE cordma_operations_completed_total counter\n") != NULL);
    CHECK(strstr(page, "cordma_operations_completed_total{kind=\"recv\"} ") != NULL);
    free(page);

    CHECK(cordma_metrics(s->server, (cordma_metrics_format)7, small, sizeof small) == -1);
    CHECK(cordma_last_errno() == EINVAL);
    CHECK(strstr(cordma_last_error(), "cordma_metrics") != NULL);
    CHECK(cordma_metrics(NULL, CORDMA_METRICS_JSON, small, sizeof small) == -1);
    CHECK(cordma_metrics(s->server, CORDMA_METRICS_JSON, NULL, 5) == -1);
}

/* Two threads send on one context at once (its calls take turns): 20
   messages each, some copied, some zero-copy; every one arrives intact,
   each thread's in its order. Byte 0 of a message is its tag: 1 + 20 *
   thread + sequence. */
typedef struct sender_arg {
    cordma_context *ctx;
    int thread;
    int failed;
} sender_arg;

static void *sender(void *p) {
    sender_arg *a = p;
    uint8_t *buf = xmalloc(6000);
    for (int seq = 0; seq < 20; ++seq) {
        unsigned tag = 1 + 20 * (unsigned)a->thread + (unsigned)seq;
        size_t len = seq % 4 == 3 ? 6000 : 100 + (size_t)seq;
        fill(buf, len, tag);
        if (cordma_send(a->ctx, 0, buf, len) != 0) {
            fprintf(stderr, "  sender %d, message %d: %s\n", a->thread, seq, cordma_last_error());
            a->failed++;
            break;
        }
    }
    free(buf);
    return NULL;
}

static void test_shared_context(star *s) {
    sender_arg args[2] = {{s->c1, 0, 0}, {s->c1, 1, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; ++i)
        REQUIRE(pthread_create(&threads[i], NULL, sender, &args[i]) == 0);
    uint8_t *in = xmalloc(6000);
    int next[2] = {0, 0};
    bool ok = true;
    for (int m = 0; m < 40 && ok; ++m) {
        ssize_t got = cordma_recv(s->server, 0, in, 6000);
        CHECK(got > 0);
        if (got <= 0)
            break;
        unsigned tag = in[0];
        int thread = (int)(tag - 1) / 20, seq = (int)(tag - 1) % 20;
        ok = tag >= 1 && tag <= 40 && seq == next[thread] && got == (seq % 4 == 3 ? 6000 : 100 + seq) &&
             pattern_ok("message from a shared context", in, (size_t)got, tag);
        if (!ok)
            fprintf(stderr, "  message %d: tag %u (thread %d, sequence %d, %zd bytes), expected sequence %d\n", m,
                    tag, thread, seq, got, tag >= 1 && tag <= 40 ? next[thread] : -1);
        CHECK(ok);
        if (ok)
            next[thread]++;
    }
    for (int i = 0; i < 2; ++i) {
        pthread_join(threads[i], NULL);
        CHECK(args[i].failed == 0);
    }
    CHECK(next[0] == 20 && next[1] == 20);

    /* A zero-length message peeks as 0. */
    CHECK(cordma_send(s->c1, 0, NULL, 0) == 0);
    CHECK(cordma_peek(s->server, 0) == 0);
    CHECK(cordma_recv(s->server, 0, in, 0) == 0);
    free(in);
}

/* A receive buffer too small loses nothing; peek tells the size. */
static void test_msgsize_and_peek(star *s) {
    uint8_t small[1234], big[20000];
    fill(small, sizeof small, 50);
    CHECK(cordma_send(s->c1, 0, small, sizeof small) == 0);

    CHECK(cordma_peek(s->server, 0) == 1234);
    CHECK(cordma_peek(s->server, 0) == 1234); /* still there */

    uint8_t tiny[100];
    errno = 0;
    CHECK(cordma_recv(s->server, 0, tiny, sizeof tiny) == -1);
    CHECK(errno == EMSGSIZE);
    CHECK(cordma_last_errno() == EMSGSIZE);
    CHECK(has(cordma_last_error(), "1234"));
    CHECK(has(cordma_last_error(), "cordma_recv"));
    CHECK(cordma_recv(s->server, 0, tiny, 0) == -1 && errno == EMSGSIZE);
    memset(big, 0, sizeof big);
    CHECK(cordma_recv(s->server, 0, big, sizeof big) == 1234);
    CHECK(pattern_ok("message after EMSGSIZE", big, 1234, 50));

    /* The same for a message sent zero-copy (larger than buffer_size). */
    uint8_t *large = xmalloc(12293);
    fill(large, 12293, 51);
    op snd = {.kind = OP_SEND, .ctx = s->c1, .peer = 0, .src = large, .len = 12293};
    op_start(&snd);
    CHECK(cordma_peek(s->server, 0) == 12293);
    errno = 0;
    CHECK(cordma_recv(s->server, 0, tiny, sizeof tiny) == -1);
    CHECK(errno == EMSGSIZE);
    CHECK(has(cordma_last_error(), "12293"));
    CHECK(cordma_recv(s->server, 0, big, 12292) == -1 && errno == EMSGSIZE); /* one byte short */
    memset(big, 0, sizeof big);
    CHECK(cordma_recv(s->server, 0, big, sizeof big) == 12293);
    CHECK(pattern_ok("large message after EMSGSIZE", big, 12293, 51));
    op_wait(&snd);
    CHECK_OP(&snd, snd.ret == 0);
    free(large);

    /* Peek waits for a message that is not there yet. */
    op later = {.kind = OP_SEND, .ctx = s->c2, .peer = 0, .src = small, .len = 777, .delay_ms = 100};
    op_start(&later);
    CHECK(cordma_peek(s->server, 1) == 777);
    CHECK(cordma_recv(s->server, 1, big, sizeof big) == 777);
    CHECK(pattern_ok("peeked message", big, 777, 50));
    op_wait(&later);
    CHECK_OP(&later, later.ret == 0);
}

/* Bad peer numbers and NULL buffers fail at once with EINVAL naming the call,
   and lose nothing. */
static void test_bad_arguments(star *s) {
    char buf[16];
#define BAD(call, name)                                                                                \
    do {                                                                                               \
        errno = 0;                                                                                     \
        CHECK((call) == -1);                                                                           \
        CHECK(errno == EINVAL);                                                                        \
        CHECK(cordma_last_errno() == EINVAL);                                                          \
        CHECK(has(cordma_last_error(), name));                                                         \
    } while (0)
    BAD(cordma_send(s->server, -1, "x", 1), "cordma_send");
    BAD(cordma_send(s->server, 99, "x", 1), "cordma_send");
    BAD(cordma_recv(s->server, -1, buf, sizeof buf), "cordma_recv");
    BAD(cordma_recv(s->server, 99, buf, sizeof buf), "cordma_recv");
    BAD(cordma_peek(s->server, -1), "cordma_peek");
    BAD(cordma_peek(s->server, 99), "cordma_peek");
    BAD(cordma_disconnect(s->server, -1), "cordma_disconnect");
    BAD(cordma_disconnect(s->server, 99), "cordma_disconnect");
    BAD(cordma_grant(s->server, 99, buf, sizeof buf, CORDMA_ACCESS_READ), "cordma_grant");
    BAD(cordma_accept_grant(s->server, -1, &(cordma_remote){0}), "cordma_accept_grant");
    BAD(cordma_send(s->server, 0, NULL, 5), "cordma_send");
    BAD(cordma_recv(s->server, 0, NULL, 5), "cordma_recv");
    BAD(cordma_broadcast(s->server, NULL, 5), "cordma_broadcast");
    BAD(cordma_alltoall(s->server, NULL, buf, 4, CORDMA_ORDER_SEQUENTIAL), "cordma_alltoall");
    BAD(cordma_alltoall(s->server, buf, NULL, 4, CORDMA_ORDER_PAIRWISE), "cordma_alltoall");
    BAD(cordma_alltoall(s->server, buf, buf, 4, (cordma_order)5), "cordma_alltoall");
    BAD(cordma_allgather(s->server, NULL, buf, 4), "cordma_allgather");
    BAD(cordma_allgather(s->server, buf, NULL, 4), "cordma_allgather");
    BAD(cordma_grant(s->server, 0, NULL, 64, CORDMA_ACCESS_READ), "cordma_grant");
    BAD(cordma_grant(s->server, 0, buf, sizeof buf, 0), "cordma_grant");
    BAD(cordma_grant(s->server, 0, buf, sizeof buf, 8), "cordma_grant");
    BAD(cordma_accept_grant(s->server, 0, NULL), "cordma_accept_grant");
    BAD(cordma_write(s->server, NULL, 0, buf, 1), "cordma_write");
    BAD(cordma_read(s->server, NULL, 0, buf, 1), "cordma_read");
    BAD(cordma_release(s->server, NULL), "cordma_release");
    BAD(cordma_connect(s->c1, NULL, s->port), "cordma_connect");
    BAD(cordma_revoke(s->server, NULL), "cordma_revoke");
#undef BAD
    CHECK(has(cordma_last_error(), "cordma_revoke"));

    /* Nothing was lost or broken: the connections still carry messages. */
    transfer(s->c1, 0, s->server, 0, 33, 60);
    transfer(s->server, 1, s->c2, 0, 33, 61);
    CHECK(cordma_peer_count(s->server) == 2);
}

static void test_broadcast(star *s) {
    const size_t sizes[] = {3000, 20000}; /* copied, and zero-copy */
    for (int k = 0; k < 2; ++k) {
        size_t len = sizes[k];
        uint8_t *out = xmalloc(len), *in1 = xmalloc(len + 1), *in2 = xmalloc(len + 1);
        fill(out, len, 70 + (unsigned)k);
        op r1 = {.kind = OP_RECV, .ctx = s->c1, .peer = 0, .dst = in1, .len = len + 1};
        op r2 = {.kind = OP_RECV, .ctx = s->c2, .peer = 0, .dst = in2, .len = len + 1};
        op_start(&r1);
        op_start(&r2);
        CHECK(cordma_broadcast(s->server, out, len) == 0);
        op_wait(&r1);
        op_wait(&r2);
        CHECK_OP(&r1, r1.ret == (long long)len);
        CHECK_OP(&r2, r2.ret == (long long)len);
        CHECK(pattern_ok("broadcast at c1", in1, len, 70 + (unsigned)k));
        CHECK(pattern_ok("broadcast at c2", in2, len, 70 + (unsigned)k));
        free(out);
        free(in1);
        free(in2);
    }
}

/* The tag of what `from` sends `to` in round `round` (0 server, 1 c1, 2 c2). */
static unsigned slot_tag(unsigned from, unsigned to, unsigned round) { return 1 + from * 3 + to + round * 9; }

/* An all-to-all of `size`-byte slots between the server (peers 0: c1, 1: c2)
   and both clients, with the given orders; checks which slot holds whose
   bytes, and that nothing is written past the slots. */
static void alltoall_round(star *s, size_t size, cordma_order server_order, cordma_order client_order,
                           unsigned round) {
    const size_t guard = 32;
    uint8_t *s_out = xmalloc(2 * size), *s_in = xmalloc(2 * size + guard);
    uint8_t *c_out[2], *c_in[2];
    for (unsigned peer = 0; peer < 2; ++peer) {
        fill(s_out + peer * size, size, slot_tag(0, peer + 1, round));
        c_out[peer] = xmalloc(size);
        c_in[peer] = xmalloc(size + guard);
        fill(c_out[peer], size, slot_tag(peer + 1, 0, round));
        memset(c_in[peer], 0xEE, size + guard);
    }
    memset(s_in, 0xEE, 2 * size + guard);

    op ops[3] = {
        {.kind = OP_ALLTOALL, .ctx = s->server, .src = s_out, .dst = s_in, .len = size, .order = server_order},
        {.kind = OP_ALLTOALL, .ctx = s->c1, .src = c_out[0], .dst = c_in[0], .len = size, .order = client_order},
        {.kind = OP_ALLTOALL, .ctx = s->c2, .src = c_out[1], .dst = c_in[1], .len = size, .order = client_order},
    };
    for (int i = 0; i < 3; ++i)
        op_start(&ops[i]);
    for (int i = 0; i < 3; ++i) {
        op_wait(&ops[i]);
        CHECK_OP(&ops[i], ops[i].ret == 0);
    }
    /* The server's slot i holds what peer i (c1, then c2) sent it. */
    CHECK(pattern_ok("server's slot 0 (from c1)", s_in, size, slot_tag(1, 0, round)));
    CHECK(pattern_ok("server's slot 1 (from c2)", s_in + size, size, slot_tag(2, 0, round)));
    CHECK(all_bytes(s_in + 2 * size, guard, 0xEE));
    /* A client's slot 0 holds the server's slot for it. */
    CHECK(pattern_ok("c1's slot 0 (from the server)", c_in[0], size, slot_tag(0, 1, round)));
    CHECK(pattern_ok("c2's slot 0 (from the server)", c_in[1], size, slot_tag(0, 2, round)));
    CHECK(all_bytes(c_in[0] + size, guard, 0xEE));
    CHECK(all_bytes(c_in[1] + size, guard, 0xEE));
    free(s_out);
    free(s_in);
    for (int peer = 0; peer < 2; ++peer) {
        free(c_out[peer]);
        free(c_in[peer]);
    }
}

static void test_alltoall(star *s) {
    alltoall_round(s, 64, CORDMA_ORDER_SEQUENTIAL, CORDMA_ORDER_SEQUENTIAL, 0);
    alltoall_round(s, 64, CORDMA_ORDER_PAIRWISE, CORDMA_ORDER_PAIRWISE, 1);
    alltoall_round(s, 1, CORDMA_ORDER_SEQUENTIAL, CORDMA_ORDER_PAIRWISE, 2);
    alltoall_round(s, 4096, CORDMA_ORDER_PAIRWISE, CORDMA_ORDER_SEQUENTIAL, 3);
    alltoall_round(s, 3 * 4096 + 7, CORDMA_ORDER_SEQUENTIAL, CORDMA_ORDER_SEQUENTIAL, 4); /* zero-copy */
    alltoall_round(s, 3 * 4096 + 7, CORDMA_ORDER_PAIRWISE, CORDMA_ORDER_PAIRWISE, 5);
    /* The connections are still in step: plain messages after collectives. */
    transfer(s->c2, 0, s->server, 1, 10, 90);
}

static void test_allgather(star *s) {
    const size_t sizes[] = {48, 10000};
    for (unsigned k = 0; k < 2; ++k) {
        size_t size = sizes[k];
        uint8_t *out[3], *in[3];
        for (unsigned i = 0; i < 3; ++i) {
            out[i] = xmalloc(size);
            fill(out[i], size, 100 + i + 3 * k); /* identifies the sender */
            in[i] = xmalloc(2 * size + 16);
            memset(in[i], 0xEE, 2 * size + 16);
        }
        cordma_context *ctx[3] = {s->server, s->c1, s->c2};
        op ops[3];
        for (int i = 0; i < 3; ++i) {
            ops[i] = (op){.kind = OP_ALLGATHER, .ctx = ctx[i], .src = out[i], .dst = in[i], .len = size};
            op_start(&ops[i]);
        }
        for (int i = 0; i < 3; ++i) {
            op_wait(&ops[i]);
            CHECK_OP(&ops[i], ops[i].ret == 0);
        }
        CHECK(pattern_ok("server's slot 0 (c1's)", in[0], size, 101 + 3 * k));
        CHECK(pattern_ok("server's slot 1 (c2's)", in[0] + size, size, 102 + 3 * k));
        CHECK(all_bytes(in[0] + 2 * size, 16, 0xEE));
        CHECK(pattern_ok("c1's slot 0 (the server's)", in[1], size, 100 + 3 * k));
        CHECK(pattern_ok("c2's slot 0 (the server's)", in[2], size, 100 + 3 * k));
        CHECK(all_bytes(in[1] + size, size + 16, 0xEE));
        CHECK(all_bytes(in[2] + size, size + 16, 0xEE));
        for (int i = 0; i < 3; ++i) {
            free(out[i]);
            free(in[i]);
        }
    }
}

/* Nobody leaves the barrier before all three have arrived: each counts
   itself in before calling it, and must see 3 when it returns. One comes
   late each round (by 300 ms). */
static void test_barrier(star *s) {
    cordma_context *ctx[3] = {s->server, s->c1, s->c2};
    for (int late = 0; late < 3; ++late) {
        atomic_int arrived = 0;
        op ops[3];
        for (int i = 0; i < 3; ++i) {
            ops[i] = (op){.kind = OP_BARRIER, .ctx = ctx[i], .arrived = &arrived, .delay_ms = i == late ? 300 : 0};
            op_start(&ops[i]);
        }
        for (int i = 0; i < 3; ++i) {
            op_wait(&ops[i]);
            CHECK_OP(&ops[i], ops[i].ret == 0);
            CHECK_OP(&ops[i], ops[i].arrived_after == 3);
        }
        /* The early ones waited for the late one. */
        for (int i = 0; i < 3; ++i)
            if (i != late)
                CHECK(ops[i].finished >= ops[late].started);
    }
}

/* Grants: the server lends memory to the clients. */
/* Waits (10 s at most) until `ctx` has heard that the owner ended `r`. */
static bool wait_grant_ended(cordma_context *ctx, const cordma_remote *r) {
    double until = now() + 10;
    for (;;) {
        int ended = cordma_grant_ended(ctx, r);
        if (ended != 0)
            return ended == 1;
        if (now() > until)
            return false;
        pause_ms(1);
    }
}

static void test_grants(star *s) {
    enum { SIZE = 8192 };
    uint8_t *mem = xmalloc(SIZE), *ro = xmalloc(SIZE), *shared = xmalloc(256);
    memset(mem, 0, SIZE);
    fill(ro, SIZE, 110);
    memset(shared, 0, 256);

    /* Read and write to c1. */
    cordma_remote remote;
    memset(&remote, 0xFF, sizeof remote);
    op g = {.kind = OP_GRANT, .ctx = s->server, .peer = 0, .dst = mem, .len = SIZE,
            .access = CORDMA_ACCESS_READ | CORDMA_ACCESS_WRITE};
    op_start(&g);
    CHECK(cordma_accept_grant(s->c1, 0, &remote) == 0);
    op_wait(&g);
    CHECK_OP(&g, g.ret == 0);
    CHECK(remote.peer == 0);
    CHECK(remote.size == SIZE);
    CHECK(remote.access == (CORDMA_ACCESS_READ | CORDMA_ACCESS_WRITE));

    /* c1 writes; the owner sees the bytes, and nothing around them. */
    uint8_t data[2000];
    fill(data, 1000, 111);
    CHECK(cordma_write(s->c1, &remote, 100, data, 1000) == 0);
    CHECK(all_bytes(mem, 100, 0));
    CHECK(pattern_ok("owner's memory after cordma_write", mem + 100, 1000, 111));
    CHECK(all_bytes(mem + 1100, SIZE - 1100, 0));
    /* To the very end. */
    CHECK(cordma_write(s->c1, &remote, SIZE - 10, data, 10) == 0);
    CHECK(pattern_ok("owner's last 10 bytes", mem + SIZE - 10, 10, 111));

    /* c1 reads what the owner wrote. */
    fill(mem + 4000, SIZE - 4000, 112);
    uint8_t *back = xmalloc(SIZE);
    memset(back, 0, SIZE);
    CHECK(cordma_read(s->c1, &remote, 4000, back, SIZE - 4000) == 0);
    CHECK(pattern_ok("cordma_read of the owner's bytes", back, SIZE - 4000, 112));

    /* Outside the region: EINVAL, and the grant still works. */
    errno = 0;
    CHECK(cordma_write(s->c1, &remote, SIZE - 10, data, 11) == -1);
    CHECK(errno == EINVAL);
    CHECK(has(cordma_last_error(), "cordma_write"));
    errno = 0;
    CHECK(cordma_read(s->c1, &remote, SIZE + 1, back, 1) == -1);
    CHECK(errno == EINVAL);
    CHECK(has(cordma_last_error(), "cordma_read"));
    errno = 0;
    CHECK(cordma_write(s->c1, &remote, UINT64_MAX - 1, data, 4) == -1); /* offset + len wraps */
    CHECK(errno == EINVAL);
    CHECK(cordma_read(s->c1, &remote, 0, back, 8) == 0);

    /* Read only, to c1. */
    cordma_remote ro_remote;
    g = (op){.kind = OP_GRANT, .ctx = s->server, .peer = 0, .dst = ro, .len = SIZE, .access = CORDMA_ACCESS_READ};
    op_start(&g);
    CHECK(cordma_accept_grant(s->c1, 0, &ro_remote) == 0);
    op_wait(&g);
    CHECK_OP(&g, g.ret == 0);
    CHECK(ro_remote.access == CORDMA_ACCESS_READ);
    CHECK(ro_remote.id != remote.id);
    errno = 0;
    CHECK(cordma_write(s->c1, &ro_remote, 0, data, 16) == -1);
    CHECK(errno == EINVAL);
    CHECK(pattern_ok("read-only memory after a refused write", ro, SIZE, 110));
    memset(back, 0, SIZE);
    CHECK(cordma_read(s->c1, &ro_remote, 0, back, SIZE) == 0);
    CHECK(pattern_ok("cordma_read of a read-only grant", back, SIZE, 110));
    /* Let go of it. */
    CHECK(cordma_release(s->c1, &ro_remote) == 0);
    CHECK(cordma_read(s->c1, &ro_remote, 0, back, 16) == -1);

    /* The same memory to both clients: revoking it ends two grants. */
    cordma_remote r1, r2;
    g = (op){.kind = OP_GRANT, .ctx = s->server, .peer = 0, .dst = shared, .len = 256, .access = CORDMA_ACCESS_WRITE};
    op_start(&g);
    CHECK(cordma_accept_grant(s->c1, 0, &r1) == 0);
    op_wait(&g);
    CHECK_OP(&g, g.ret == 0);
    g = (op){.kind = OP_GRANT, .ctx = s->server, .peer = 1, .dst = shared, .len = 256, .access = CORDMA_ACCESS_WRITE};
    op_start(&g);
    CHECK(cordma_accept_grant(s->c2, 0, &r2) == 0);
    op_wait(&g);
    CHECK_OP(&g, g.ret == 0);
    CHECK(r2.peer == 0 && r2.size == 256 && r2.access == CORDMA_ACCESS_WRITE);
    fill(data, 128, 113);
    CHECK(cordma_write(s->c1, &r1, 0, data, 128) == 0);
    fill(data + 128, 128, 114);
    CHECK(cordma_write(s->c2, &r2, 128, data + 128, 128) == 0);
    CHECK(pattern_ok("shared memory, c1's half", shared, 128, 113));
    CHECK(pattern_ok("shared memory, c2's half", shared + 128, 128, 114));
    errno = 0;
    CHECK(cordma_read(s->c2, &r2, 0, back, 1) == -1); /* write only */
    CHECK(errno == EINVAL);

    CHECK(cordma_grant_ended(s->c1, &r1) == 0);
    CHECK(cordma_revoke(s->server, shared) == 2);
    memset(shared, 0, 256);
    /* The revoke reaches the holders by message: an access before it
       arrives would fail in the hardware and close the connection, so
       each holder waits until it has heard (bounded). */
    CHECK(wait_grant_ended(s->c1, &r1));
    CHECK(wait_grant_ended(s->c2, &r2));
    errno = 0;
    CHECK(cordma_write(s->c1, &r1, 0, data, 8) == -1);
    CHECK(errno == EACCES);
    CHECK(has(cordma_last_error(), "cordma_write"));
    errno = 0;
    CHECK(cordma_write(s->c2, &r2, 0, data, 8) == -1);
    CHECK(errno == EACCES);
    CHECK(all_bytes(shared, 256, 0));

    int ended = cordma_revoke(s->server, ro); /* released already: 0, or 1 if the release is not seen yet */
    CHECK(ended == 0 || ended == 1);
    CHECK(cordma_revoke(s->server, mem) == 1);
    CHECK(wait_grant_ended(s->c1, &remote));
    errno = 0;
    CHECK(cordma_write(s->c1, &remote, 0, data, 8) == -1);
    CHECK(errno == EACCES);
    errno = 0;
    CHECK(cordma_read(s->c1, &remote, 0, back, 8) == -1);
    CHECK(errno == EACCES);
    CHECK(cordma_release(s->c1, &remote) == 0 || cordma_last_errno() == EACCES);

    /* A refused access closes nothing: the connections carry on. */
    CHECK(cordma_peer_connected(s->c1, 0) == 1);
    CHECK(cordma_peer_connected(s->server, 0) == 1);
    transfer(s->c1, 0, s->server, 0, 5000, 115);
    transfer(s->server, 1, s->c2, 0, 50, 116);
    free(mem);
    free(ro);
    free(shared);
    free(back);
}

/* rdma_lib's all-to-all (rdma_lib.h): the clients' and the server's texts
   joined in peer order, everybody gets the same. Plus the wrappers'
   return values. */
static void test_rdma_lib(star *s) {
    char s_in[BUFFER_SIZE], c1_in[BUFFER_SIZE], c2_in[BUFFER_SIZE];
    char s_msg[16] = "Srv", c1_msg[16] = "One", c2_msg[16] = "Two";
    op ops[3] = {
        {.kind = OP_RDMA_LIB_ALLTOALL, .ctx = s->server, .src = s_msg, .dst = s_in, .len = sizeof s_msg},
        {.kind = OP_RDMA_LIB_ALLTOALL, .ctx = s->c1, .src = c1_msg, .dst = c1_in, .len = sizeof c1_msg},
        {.kind = OP_RDMA_LIB_ALLTOALL, .ctx = s->c2, .src = c2_msg, .dst = c2_in, .len = sizeof c2_msg},
    };
    for (int i = 0; i < 3; ++i)
        op_start(&ops[i]);
    for (int i = 0; i < 3; ++i) {
        op_wait(&ops[i]);
        CHECK_OP(&ops[i], ops[i].ret == 0);
    }
    const char *expected = "Srv; One; Two;";
    CHECK(strcmp(s_in, expected) == 0);
    CHECK(strcmp(c1_in, expected) == 0);
    CHECK(strcmp(c2_in, expected) == 0);
    if (strcmp(s_in, expected) != 0)
        fprintf(stderr, "  rdma_lib all-to-all at the server: \"%.100s\", expected \"%s\"\n", s_in, expected);

    CHECK(rdma_send(s->c1, 0, "abc", 4) == 4);
    char buf[16];
    CHECK(rdma_recv(s->server, 0, buf, sizeof buf) == 4);
    CHECK(strcmp(buf, "abc") == 0);
    CHECK(rdma_send(s->server, 5, "abc", 4) == -1);
    CHECK(has(rdma_get_error(), "cordma_send"));
}

/* ---- 3. pairs of their own ---------------------------------------------- */

typedef struct pair {
    cordma_context *a; /* listens */
    cordma_context *b; /* connects: each is the other's peer 0 */
} pair;

static pair make_pair(const cordma_config *listening, const cordma_config *connecting) {
    pair p = {create_or_die(listening), create_or_die(connecting)};
    CHECK(join(p.a, p.b, 0) == 0);
    return p;
}

static void destroy_pair(pair *p) {
    cordma_destroy(p->a);
    cordma_destroy(p->b);
}

/* A peer that sends a plain message where a collective is expected, or the
   other way round, or another size: EPROTO, and nothing is lost. */
static void test_mismatch(void) {
    cordma_config l = test_config(true), c = test_config(false);
    uint8_t a_out[8], a_in[8], b_out[8], b_in[8];

    /* b is in an all-to-all; a peeks and receives: EPROTO both, then a's
       all-to-all completes it. */
    pair p = make_pair(&l, &c);
    fill(b_out, 8, 120);
    fill(a_out, 8, 121);
    op coll = {.kind = OP_ALLTOALL, .ctx = p.b, .src = b_out, .dst = b_in, .len = 8, .order = CORDMA_ORDER_SEQUENTIAL};
    op_start(&coll);
    errno = 0;
    CHECK(cordma_peek(p.a, 0) == -1);
    CHECK(errno == EPROTO);
    CHECK(has(cordma_last_error(), "cordma_peek"));
    errno = 0;
    CHECK(cordma_recv(p.a, 0, a_in, sizeof a_in) == -1);
    CHECK(errno == EPROTO);
    CHECK(cordma_alltoall(p.a, a_out, a_in, 8, CORDMA_ORDER_PAIRWISE) == 0);
    op_wait(&coll);
    CHECK_OP(&coll, coll.ret == 0);
    CHECK(pattern_ok("a's slot after EPROTO", a_in, 8, 120));
    CHECK(pattern_ok("b's slot", b_in, 8, 121));
    transfer(p.a, 0, p.b, 0, 9, 122); /* still in step */
    destroy_pair(&p);

    /* A sends a plain message while B calls cordma_alltoall: B gets EPROTO
       naming the call, and B's cordma_recv then gets A's message intact. */
    p = make_pair(&l, &c);
    const char hello[] = "hello, not a collective";
    CHECK(cordma_send(p.b, 0, hello, sizeof hello) == 0);
    errno = 0;
    double t0 = now();
    CHECK(cordma_alltoall(p.a, a_out, a_in, 8, CORDMA_ORDER_SEQUENTIAL) == -1);
    CHECK(now() - t0 < 5);
    CHECK(errno == EPROTO);
    CHECK(cordma_last_errno() == EPROTO);
    CHECK(has(cordma_last_error(), "cordma_alltoall"));
    CHECK(has(cordma_last_error(), "peer 0"));
    fprintf(stderr, "  (mismatch message: \"%s\")\n", cordma_last_error());
    char got[64] = {0};
    CHECK(cordma_recv(p.a, 0, got, sizeof got) == (ssize_t)sizeof hello);
    CHECK(strcmp(got, hello) == 0);
    CHECK(cordma_peer_connected(p.a, 0) == 1);
    destroy_pair(&p);

    /* Both call cordma_alltoall, with different sizes: both EPROTO. */
    p = make_pair(&l, &c);
    uint8_t big_out[16], big_in[16];
    op other = {.kind = OP_ALLTOALL, .ctx = p.b, .src = big_out, .dst = big_in, .len = 16, .order = CORDMA_ORDER_SEQUENTIAL};
    memset(big_out, 1, sizeof big_out);
    op_start(&other);
    errno = 0;
    CHECK(cordma_alltoall(p.a, a_out, a_in, 8, CORDMA_ORDER_SEQUENTIAL) == -1);
    CHECK(errno == EPROTO);
    op_wait(&other);
    CHECK_OP(&other, other.ret == -1);
    CHECK_OP(&other, other.err == EPROTO);
    CHECK_OP(&other, other.finished - other.started < 5);
    destroy_pair(&p);

    /* Different collectives: an all-gather against a barrier. */
    p = make_pair(&l, &c);
    op bar = {.kind = OP_BARRIER, .ctx = p.b};
    op_start(&bar);
    errno = 0;
    CHECK(cordma_allgather(p.a, a_out, a_in, 8) == -1);
    CHECK(errno == EPROTO);
    CHECK(has(cordma_last_error(), "cordma_allgather"));
    op_wait(&bar);
    CHECK_OP(&bar, bar.ret == -1);
    CHECK_OP(&bar, bar.err == EPROTO);
    destroy_pair(&p);
}

/* timeout_ms bounds every wait: ETIMEDOUT, and the connection goes on. */
static void test_timeouts(void) {
    cordma_config l = test_config(true), c = test_config(false);
    l.timeout_ms = 300;
    cordma_context *lonely = create_or_die(&l);
    double t0 = now();
    errno = 0;
    CHECK(cordma_accept(lonely) == -1);
    double took = now() - t0;
    CHECK(errno == ETIMEDOUT);
    CHECK(has(cordma_last_error(), "cordma_accept"));
    CHECK(took >= 0.25 && took < 5);
    cordma_destroy(lonely);

    /* Adaptive polling on both ends: a caller that spins for its answer
       and then sleeps still times out, and is woken by what follows. */
    l = test_config(true);
    c.timeout_ms = 1000;
    l.polling = c.polling = CORDMA_POLLING_ADAPTIVE;
    pair p = make_pair(&l, &c);
    uint8_t buf[70000];
    t0 = now();
    errno = 0;
    CHECK(cordma_recv(p.b, 0, buf, sizeof buf) == -1);
    took = now() - t0;
    CHECK(errno == ETIMEDOUT);
    CHECK(has(cordma_last_error(), "cordma_recv"));
    CHECK(took >= 0.9 && took < 5);
    CHECK(cordma_peek(p.b, 0) == -1 && errno == ETIMEDOUT);
    /* A timed-out call took nothing and broke nothing. */
    CHECK(cordma_peer_connected(p.b, 0) == 1);
    transfer(p.a, 0, p.b, 0, 1, 123);
    transfer(p.a, 0, p.b, 0, 65536, 124);
    transfer(p.b, 0, p.a, 0, 65536, 125);
    /* Last, as it leaves its arrival at the peer: a barrier times out too. */
    t0 = now();
    CHECK(cordma_barrier(p.b) == -1 && errno == ETIMEDOUT);
    CHECK(now() - t0 < 5);
    destroy_pair(&p);
}

/* Sends `count` messages of 50 bytes (tags 2, 3, ...) one after another,
   counting those that returned. */
typedef struct send_many_arg {
    cordma_context *ctx;
    int count;
    atomic_int done;
    int failed;
} send_many_arg;

static void *send_many(void *p) {
    send_many_arg *a = p;
    uint8_t out[50];
    for (int m = 0; m < a->count; ++m) {
        fill(out, sizeof out, 2 + (unsigned)m);
        if (cordma_send(a->ctx, 0, out, sizeof out) != 0) {
            fprintf(stderr, "  send_many: message %d: %s\n", m, cordma_last_error());
            a->failed++;
            break;
        }
        atomic_fetch_add(&a->done, 1);
    }
    return NULL;
}

/* The TCP exchange, the smallest buffer and window, and the other polling
   modes. */
static void test_tcp_small_window(void) {
    cordma_config l = test_config(true), c = test_config(false);
    l.exchange = c.exchange = CORDMA_EXCHANGE_TCP;
    l.port = 0; /* any free port, over TCP as over rdma_cm */
    l.buffer_size = c.buffer_size = 64;
    l.window = c.window = 2;
    l.polling = CORDMA_POLLING_YIELDING;
    c.polling = CORDMA_POLLING_BUSY;
    pair p = make_pair(&l, &c);
    CHECK(cordma_local_port(p.a) > 0);
    transfer(p.b, 0, p.a, 0, 64, 126);
    transfer(p.b, 0, p.a, 0, 65, 127);
    transfer(p.a, 0, p.b, 0, 100000, 1);

    /* Ten messages against a window of 2: the sender waits for room, and
       everything arrives, in order, once the receiver reads. */
    send_many_arg arg = {.ctx = p.b, .count = 10};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, send_many, &arg) == 0);
    pause_ms(300); /* the sender fills the window meanwhile, and waits */
    int before = atomic_load(&arg.done);
    CHECK(before <= 2);
    if (before > 2)
        fprintf(stderr, "  %d sends returned against a window of 2 before any receive\n", before);
    uint8_t in[64];
    for (int m = 0; m < 10; ++m) {
        CHECK(cordma_recv(p.a, 0, in, sizeof in) == 50);
        CHECK(pattern_ok("windowed message", in, 50, 2 + (unsigned)m));
    }
    pthread_join(t, NULL);
    CHECK(arg.failed == 0);
    CHECK(atomic_load(&arg.done) == 10);

    op bar = {.kind = OP_BARRIER, .ctx = p.a};
    op_start(&bar);
    CHECK(cordma_barrier(p.b) == 0);
    op_wait(&bar);
    CHECK_OP(&bar, bar.ret == 0);
    destroy_pair(&p);
}

/* A burst of clients against a slow cordma_accept: 64 contexts connect at
   once, each on its own thread, while the server accepts one every 10 ms;
   the listener completes their handshakes meanwhile (its backlog), so
   every one is served: its message comes back, every byte checked. */
enum { BURST = 64 };

typedef struct burst_client {
    int port;
    unsigned index;
    int ok; /* 1: connected, sent, and its echo came back intact */
    char msg[512];
} burst_client;

static void *burst_main(void *p) {
    burst_client *b = p;
    cordma_config c = test_config(false);
    /* Its cordma_connect returns once the server's cordma_accept takes it
       (the 64th about 0.7 s in, more under a sanitizer or load). */
    c.connect_timeout_ms = 30000;
    cordma_context *ctx = cordma_create(&c);
    if (!ctx) {
        snprintf(b->msg, sizeof b->msg, "cordma_create: %s", cordma_last_error());
        return NULL;
    }
    uint8_t out[200], in[264];
    fill(out, sizeof out, 300 + b->index);
    int peer = cordma_connect(ctx, test_addr, b->port);
    ssize_t got = -1;
    if (peer >= 0 && cordma_send(ctx, peer, out, sizeof out) == 0)
        got = cordma_recv(ctx, peer, in, sizeof in);
    if (got == (ssize_t)sizeof out && memcmp(in, out, sizeof out) == 0)
        b->ok = 1;
    else
        snprintf(b->msg, sizeof b->msg, "peer %d, echo of %zd bytes: %s", peer, got,
                 got < 0 ? cordma_last_error() : "bytes differ");
    cordma_destroy(ctx);
    return NULL;
}

static void test_slow_accept_burst(void) {
    cordma_config l = test_config(true);
    cordma_context *server = create_or_die(&l);
    burst_client clients[BURST];
    pthread_t threads[BURST];
    for (unsigned i = 0; i < BURST; ++i) {
        clients[i] = (burst_client){.port = cordma_local_port(server), .index = i};
        REQUIRE(pthread_create(&threads[i], NULL, burst_main, &clients[i]) == 0);
    }
    int accepted = 0;
    for (int i = 0; i < BURST; ++i) {
        pause_ms(10); /* a slow server: the clients all connect meanwhile */
        int peer = cordma_accept(server);
        CHECK(peer == i);
        if (peer < 0) {
            fprintf(stderr, "  cordma_accept %d of %d: %s\n", i + 1, BURST, cordma_last_error());
            break;
        }
        ++accepted;
    }
    /* Each client's message back to it (its number is the server's peer
       number in accept order, not the client's index: the echo says). */
    for (int peer = 0; peer < accepted; ++peer) {
        uint8_t buf[264];
        ssize_t n = cordma_recv(server, peer, buf, sizeof buf);
        CHECK(n == 200);
        if (n > 0)
            CHECK(cordma_send(server, peer, buf, (size_t)n) == 0);
    }
    int served = 0;
    for (unsigned i = 0; i < BURST; ++i) {
        pthread_join(threads[i], NULL);
        if (clients[i].ok)
            ++served;
        else
            fprintf(stderr, "  burst client %u: %s\n", i, clients[i].msg);
    }
    CHECK(served == BURST);
    cordma_destroy(server);
}

/* Connecting where nothing listens, and to a listener with another
   buffer_size. */
static void test_connect_errors(void) {
    cordma_config c = test_config(false);
    c.connect_timeout_ms = 1000;
    cordma_context *client = create_or_die(&c);
    cordma_config l = test_config(true);
    cordma_context *gone = create_or_die(&l);
    int port = cordma_local_port(gone);
    cordma_destroy(gone); /* nothing listens there now */
    double t0 = now();
    errno = 0;
    CHECK(cordma_connect(client, test_addr, port) == -1);
    CHECK(errno == ECONNREFUSED);
    CHECK(has(cordma_last_error(), "cordma_connect"));
    CHECK(now() - t0 < 5);
    CHECK(cordma_peer_count(client) == 0);

    /* buffer_size 8192 against a listener's 4096: each side receives
       inline up to its own and sends inline up to the other's, so they
       connect, and every size across both limits arrives intact. */
    l.timeout_ms = 3000;
    cordma_context *server = create_or_die(&l);
    c.buffer_size = 8192;
    c.connect_timeout_ms = 5000;
    cordma_context *other = create_or_die(&c);
    port = cordma_local_port(server);
    op acc = {.kind = OP_ACCEPT, .ctx = server};
    op_start(&acc);
    errno = 0;
    int got = cordma_connect(other, test_addr, port);
    int err = errno;
    op_wait(&acc);
    int next = 1;
    CHECK(got == 0);
    if (got != 0)
        fprintf(stderr, "  connect failed (errno %d): %s\n", err, cordma_last_error());
    CHECK_OP(&acc, acc.ret == 0);
    const size_t sizes[] = {4096, 4097, 5000, 8192, 8193, 100000};
    for (unsigned k = 0; got == 0 && k < sizeof sizes / sizeof sizes[0]; ++k) {
        transfer(other, 0, server, 0, sizes[k], 20 + k);
        transfer(server, 0, other, 0, sizes[k], 30 + k);
    }
    /* The failed ones leave the listener fine. */
    l.timeout_ms = TIMEOUT_MS;
    CHECK(join(server, client, next) == next);
    transfer(client, 0, server, next, 100, 3);
    cordma_destroy(other);
    cordma_destroy(client);
    cordma_destroy(server);
}

/* ---- 4. peers that go away ----------------------------------------------- */

static bool gone_errno(int err) { return err == ENOTCONN || err == ECONNRESET || err == ECONNABORTED || err == EPIPE; }

static void test_peer_gone(star *s) {
    /* c2 goes away while the server waits for its message. */
    uint8_t buf[256];
    op r = {.kind = OP_RECV, .ctx = s->server, .peer = 1, .dst = buf, .len = sizeof buf};
    op_start(&r);
    pause_ms(200); /* let the receive start waiting */
    double t0 = now();
    cordma_destroy(s->c2);
    s->c2 = NULL;
    op_wait(&r);
    double took = now() - t0;
    CHECK_OP(&r, r.ret == -1);
    CHECK_OP(&r, gone_errno(r.err));
    CHECK_OP(&r, has(r.msg, "cordma_recv"));
    CHECK_OP(&r, has(r.msg, "peer 1"));
    CHECK(took < 5);
    fprintf(stderr, "  (peer gone after %.3f s: \"%s\")\n", took, r.msg);

    /* From then on, calls naming it fail at once. */
    CHECK(cordma_peer_connected(s->server, 1) == 0);
    CHECK(cordma_peer_count(s->server) == 2);
    CHECK(cordma_peer_address(s->server, 1) != NULL);
    t0 = now();
    errno = 0;
    CHECK(cordma_send(s->server, 1, "x", 1) == -1);
    CHECK(errno == ENOTCONN);
    CHECK(has(cordma_last_error(), "peer 1"));
    errno = 0;
    CHECK(cordma_recv(s->server, 1, buf, sizeof buf) == -1);
    CHECK(errno == ENOTCONN);
    CHECK(cordma_peek(s->server, 1) == -1 && errno == ENOTCONN);
    CHECK(cordma_grant(s->server, 1, buf, sizeof buf, CORDMA_ACCESS_READ) == -1 && errno == ENOTCONN);
    CHECK(cordma_accept_grant(s->server, 1, &(cordma_remote){0}) == -1 && errno == ENOTCONN);
    CHECK(now() - t0 < 1);

    /* Collectives go on with the connected peers; the gone peer's slots are
       neither sent nor written. */
    uint8_t out[2 * 32], in[2 * 32], c_out[32], c_in[32];
    fill(out, 32, 4);
    fill(out + 32, 32, 5);
    fill(c_out, 32, 6);
    memset(in, 0xEE, sizeof in);
    op a2a = {.kind = OP_ALLTOALL, .ctx = s->c1, .src = c_out, .dst = c_in, .len = 32, .order = CORDMA_ORDER_PAIRWISE};
    op_start(&a2a);
    CHECK(cordma_alltoall(s->server, out, in, 32, CORDMA_ORDER_SEQUENTIAL) == 0);
    op_wait(&a2a);
    CHECK_OP(&a2a, a2a.ret == 0);
    CHECK(pattern_ok("server's slot 0 with peer 1 gone", in, 32, 6));
    CHECK(all_bytes(in + 32, 32, 0xEE));
    CHECK(pattern_ok("c1's slot with peer 1 gone", c_in, 32, 4));

    memset(in, 0xEE, sizeof in);
    op ag = {.kind = OP_ALLGATHER, .ctx = s->c1, .src = c_out, .dst = c_in, .len = 32};
    op_start(&ag);
    CHECK(cordma_allgather(s->server, out, in, 32) == 0);
    op_wait(&ag);
    CHECK_OP(&ag, ag.ret == 0);
    CHECK(pattern_ok("server's all-gather slot 0 with peer 1 gone", in, 32, 6));
    CHECK(all_bytes(in + 32, 32, 0xEE));

    op rb = {.kind = OP_RECV, .ctx = s->c1, .peer = 0, .dst = c_in, .len = sizeof c_in};
    op_start(&rb);
    CHECK(cordma_broadcast(s->server, out, 20) == 0);
    op_wait(&rb);
    CHECK_OP(&rb, rb.ret == 20);
    CHECK(pattern_ok("broadcast with peer 1 gone", c_in, 20, 4));

    op bar = {.kind = OP_BARRIER, .ctx = s->c1};
    op_start(&bar);
    CHECK(cordma_barrier(s->server) == 0);
    op_wait(&bar);
    CHECK_OP(&bar, bar.ret == 0);

    /* A new client gets a new number: 1 is never reused. */
    cordma_config c = test_config(false);
    cordma_context *c3 = create_or_die(&c);
    CHECK(join(s->server, c3, 2) == 2);
    CHECK(cordma_peer_count(s->server) == 3);
    transfer(c3, 0, s->server, 2, 4097, 7);

    /* The server disconnects c1 while c1 waits for a message from it. */
    op r1 = {.kind = OP_RECV, .ctx = s->c1, .peer = 0, .dst = buf, .len = sizeof buf};
    op_start(&r1);
    pause_ms(200);
    t0 = now();
    CHECK(cordma_disconnect(s->server, 0) == 0);
    op_wait(&r1);
    took = now() - t0;
    CHECK_OP(&r1, r1.ret == -1);
    CHECK_OP(&r1, r1.err == ENOTCONN);
    CHECK_OP(&r1, has(r1.msg, "peer 0"));
    CHECK(took < 5);
    CHECK(cordma_peer_connected(s->server, 0) == 0);
    CHECK(cordma_disconnect(s->server, 0) == 0); /* twice is fine */
    CHECK(cordma_peer_connected(s->c1, 0) == 0);
    errno = 0;
    CHECK(cordma_send(s->c1, 0, "x", 1) == -1);
    CHECK(errno == ENOTCONN);
    CHECK(cordma_peer_count(s->server) == 3);
    CHECK(cordma_peer_connected(s->server, 2) == 1);
    transfer(s->server, 2, c3, 0, 300, 8); /* the others go on */

    /* The client disconnects, too: its peer sees it. */
    op r3 = {.kind = OP_RECV, .ctx = s->server, .peer = 2, .dst = buf, .len = sizeof buf};
    op_start(&r3);
    pause_ms(100);
    CHECK(cordma_disconnect(c3, 0) == 0);
    op_wait(&r3);
    CHECK_OP(&r3, r3.ret == -1);
    CHECK_OP(&r3, r3.err == ENOTCONN);
    CHECK(cordma_peer_connected(c3, 0) == 0);
    CHECK(cordma_peer_connected(s->server, 2) == 0);

    /* Everything is freed after failures (ASan's leak check proves it). */
    cordma_destroy(c3);
    cordma_destroy(s->c1);
    cordma_destroy(s->server);
    s->c1 = s->server = NULL;
}

/* Sends that wait on the receiver (for room in its window, or for it to
   read a large message) fail promptly when it goes away. */
/* The peer of "killed process": connects, sends one message, and is killed
   (SIGKILL: no cordma code runs after it). */
static int killed_child(const char *port) {
    cordma_config c = test_config(false);
    cordma_context *ctx = cordma_create(&c);
    if (!ctx || cordma_connect(ctx, test_addr, atoi(port)) != 0 || cordma_send(ctx, 0, "alive", 6) != 0) {
        fprintf(stderr, "c_api_test --child: %s\n", cordma_last_error());
        return 2;
    }
    raise(SIGKILL);
    return 3;
}

/* A peer process killed while this side waits for its next message: the
   wait fails promptly, naming the peer, and the context goes on serving. */
static void test_killed_process(void) {
    cordma_config l = test_config(true);
    cordma_context *server = create_or_die(&l);
    char port[16];
    snprintf(port, sizeof port, "%d", cordma_local_port(server));
    char *argv[] = {"/proc/self/exe", "--child", port, NULL};
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) == 0);
    CHECK(cordma_accept(server) == 0);
    char buf[16] = {0};
    CHECK(cordma_recv(server, 0, buf, sizeof buf) == 6);
    CHECK(strcmp(buf, "alive") == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    double t0 = now();
    errno = 0;
    CHECK(cordma_recv(server, 0, buf, sizeof buf) == -1);
    int err = errno;
    CHECK(now() - t0 < 5);
    CHECK(gone_errno(err));
    CHECK(has(cordma_last_error(), "peer 0"));
    CHECK(cordma_peer_connected(server, 0) == 0);
    /* Still serving: another peer connects and talks. */
    cordma_config c = test_config(false);
    cordma_context *next = create_or_die(&c);
    CHECK(join(server, next, 1) == 1);
    transfer(next, 0, server, 1, 5000, 9);
    cordma_destroy(next);
    cordma_destroy(server);
}

static void test_blocked_sends(void) {
    cordma_config l = test_config(true), c = test_config(false);
    l.window = 2; /* the receiver's window: b may have 2 messages in flight to a */
    c.polling = CORDMA_POLLING_ADAPTIVE; /* the blocked sender sleeps after its spin, and is woken */
    for (int large = 0; large < 2; ++large) {
        pair p = make_pair(&l, &c);
        uint8_t *msg = xmalloc(1 << 20);
        fill(msg, 1 << 20, 11);
        int queued = 0;
        if (!large) { /* fill the window */
            for (; queued < 2; ++queued)
                CHECK(cordma_send(p.b, 0, msg, 10) == 0);
        }
        op snd = {.kind = OP_SEND, .ctx = p.b, .peer = 0, .src = msg, .len = large ? (size_t)1 << 20 : 10};
        op_start(&snd);
        pause_ms(300); /* it waits: a never receives */
        double t0 = now();
        cordma_destroy(p.a);
        op_wait(&snd);
        double took = now() - t0;
        CHECK_OP(&snd, snd.ret == -1);
        CHECK_OP(&snd, gone_errno(snd.err));
        CHECK_OP(&snd, has(snd.msg, "cordma_send"));
        CHECK_OP(&snd, has(snd.msg, "peer 0"));
        CHECK(took < 5);
        CHECK(cordma_peer_connected(p.b, 0) == 0);
        fprintf(stderr, "  (%s send failed %.3f s after its receiver went: \"%s\")\n", large ? "a 1 MiB" : "a windowed",
                took, snd.msg);
        cordma_destroy(p.b);
        free(msg);
    }
}

/* A context destroyed with messages still unread, grants outstanding and
   peers connected frees everything too. */
static void test_destroy_busy(void) {
    cordma_config l = test_config(true), c = test_config(false);
    pair p = make_pair(&l, &c);
    uint8_t msg[100], mem[512];
    fill(msg, sizeof msg, 9);
    CHECK(cordma_send(p.b, 0, msg, sizeof msg) == 0);
    CHECK(cordma_send(p.b, 0, msg, sizeof msg) == 0);
    op g = {.kind = OP_GRANT, .ctx = p.a, .peer = 0, .dst = mem, .len = sizeof mem, .access = CORDMA_ACCESS_READ};
    op_start(&g);
    cordma_remote remote;
    CHECK(cordma_accept_grant(p.b, 0, &remote) == 0);
    op_wait(&g);
    CHECK_OP(&g, g.ret == 0);
    CHECK(cordma_grant(p.b, 0, msg, sizeof msg, CORDMA_ACCESS_WRITE) == 0); /* never taken */
    /* One side goes; the other's calls then fail at once, and it goes too. */
    cordma_destroy(p.a);
    errno = 0;
    uint8_t buf[8];
    double t0 = now();
    CHECK(cordma_read(p.b, &remote, 0, buf, 8) == -1);
    CHECK(cordma_recv(p.b, 0, buf, sizeof buf) == -1);
    CHECK(gone_errno(cordma_last_errno()));
    CHECK(now() - t0 < 5);
    cordma_destroy(p.b);
}

static bool wanted(const char *only, const char *name) { return !only || !*only || strstr(name, only); }

static void section_done(const char *name, double started) {
    printf("c_api_test: %-20s %6.2f s, %d checks so far\n", name, now() - started, atomic_load(&checks_passed));
}

/* Sections that stand alone: each runs if CORDMA_C_API_ONLY wants it. */
typedef struct {
    const char *name;
    void (*run)(void);
} section;

static void run_sections(const char *only, const section *sections, size_t count) {
    for (size_t i = 0; i < count; ++i)
        if (wanted(only, sections[i].name)) {
            double t0 = now();
            sections[i].run();
            section_done(sections[i].name, t0);
        }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_addr = getenv("CORDMA_TEST_ADDR");
    if (!test_addr || !*test_addr)
        test_addr = getenv("RXE_VM_ADDR");
    if (!test_addr || !*test_addr) {
        fprintf(stderr, "c_api_test: no test address: run it inside tools/rxe-vm (RXE_VM_ADDR) or set "
                        "CORDMA_TEST_ADDR to an address of a host RDMA device\n");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return killed_child(argv[2]);
    printf("c_api_test: contexts on %s\n", test_addr);

    /* CORDMA_C_API_ONLY=TEXT runs only the sections whose name has TEXT
       (the star's "connect" and "peer gone", which set it up and take it
       down, run whenever one of its sections does). */
    const char *only = getenv("CORDMA_C_API_ONLY");
    const section alone[] = {
        {"config defaults", test_config_defaults},
        {"create", test_create},
        {"errors per thread", test_errors_per_thread},
        {"NULL context", test_null_context},
    };
    run_sections(only, alone, sizeof alone / sizeof alone[0]);

    star s = {0};
    struct {
        const char *name;
        void (*run)(star *);
    } in_star[] = {
        {"connect", test_connect},
        {"messages", test_messages},
        {"trace", test_trace},
        {"metrics", test_metrics},
        {"EMSGSIZE and peek", test_msgsize_and_peek},
        {"shared context", test_shared_context},
        {"bad arguments", test_bad_arguments},
        {"broadcast", test_broadcast},
        {"alltoall", test_alltoall},
        {"allgather", test_allgather},
        {"barrier", test_barrier},
        {"grants", test_grants},
        {"rdma_lib", test_rdma_lib},
        {"peer gone", test_peer_gone},
    };
    const size_t star_sections = sizeof in_star / sizeof in_star[0];
    bool any = false;
    for (size_t i = 0; i < star_sections; ++i)
        any = any || wanted(only, in_star[i].name);
    for (size_t i = 0; any && i < star_sections; ++i)
        if (i == 0 || i == star_sections - 1 || wanted(only, in_star[i].name)) {
            double t0 = now();
            in_star[i].run(&s);
            section_done(in_star[i].name, t0);
        }

    const section more[] = {
        {"mismatch", test_mismatch},
        {"timeouts", test_timeouts},
        {"tcp, small window", test_tcp_small_window},
        {"slow accept, burst of 64", test_slow_accept_burst},
        {"connect errors", test_connect_errors},
        {"blocked sends", test_blocked_sends},
        {"destroy busy", test_destroy_busy},
        {"killed process", test_killed_process},
    };
    run_sections(only, more, sizeof more / sizeof more[0]);
    return summary();
}
