// hostile_peer: a peer that gets connected to a cordma server the way a
// cordma client does, then breaks the protocol. Plain C11, libibverbs and
// librdmacm only: nothing of cordma's code, so nothing it gets wrong is
// shared with the server it attacks. tests/faults/hostile.sh runs every
// scenario against tests/support/hostile_target.
//
//   hostile_peer SCENARIO HOST:PORT
//   hostile_peer list              (every scenario, one per line)
//
// PORT is the listener the scenario attacks: the agent's rdma_cm listener
// (agent-*, cm-*, forged-*), the agent's TCP endpoint exchange (tcp-*), the
// rpc server (rpc-*) or the stream listener (stream-*). Each scenario
// impersonates a cordma client far enough to reach the decoder it attacks
// (the rdma_cm hello for the data and the control QP, the TCP endpoint
// messages and QP bring-up, the rpc hello, the stream's link hello), sends
// its one bad input, and then checks what THIS side sees: the server
// closes the connection (a DISCONNECTED event, or EOF on the TCP socket),
// refuses it (REJECTED), answers (a deny, an error response), or this
// side's QP fails (a forged rkey). Exit 0 when it saw what the scenario
// expects, 1 (with a line naming the scenario and what it saw instead)
// otherwise, 2 for bad usage. Every wait is bounded; the whole run is cut
// at 40 s by alarm().
//
// Wire formats: docs/wire-formats.md, docs/agent-protocol.md, docs/rpc.md,
// lib/link/link_wire.hpp.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "raw_peer.h"

static const char *scenario = "?";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hostile_peer %s: FAIL: ", scenario);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("hostile_peer %s: ", scenario);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char text[] = "hostile_peer: FAIL: the scenario did not finish within 40 s\n";
    if (write(2, text, sizeof text - 1) < 0) {
    }
    _exit(3);
}

/* ---- bytes ---------------------------------------------------------- */

static void le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v) { le16(p, (uint16_t)v); le16(p + 2, (uint16_t)(v >> 16)); }
static void le64(uint8_t *p, uint64_t v) { le32(p, (uint32_t)v); le32(p + 4, (uint32_t)(v >> 32)); }
static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_le64(const uint8_t *p) { return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32; }

static uint64_t random64(void) {
    static uint64_t state;
    if (state == 0)
        state = (uint64_t)now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 17 ^ (uint64_t)(uintptr_t)&state;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* ---- the agent's messages (little-endian; docs/agent-protocol.md) --- */

enum { agent_request = 1, agent_grant = 2, agent_deny = 3, agent_return = 4, agent_release = 5, agent_ack = 7 };

/* Header: magic "CA", version 2, type, body_length, acked. */
static size_t agent_header(uint8_t *p, uint8_t type, uint16_t body_length, uint16_t acked) {
    le16(p, 0x4341);
    p[2] = 2;
    p[3] = type;
    le16(p + 4, body_length);
    le16(p + 6, acked);
    return 8;
}

static size_t agent_request_mr(uint8_t *p, uint32_t id, uint64_t size, uint32_t alignment, uint32_t access) {
    agent_header(p, agent_request, 24, 0);
    le32(p + 8, id);
    le64(p + 12, size);
    le32(p + 20, alignment);
    le32(p + 24, 60000);  // lease_ms
    le32(p + 28, access);
    return 32;
}

/* ---- rdma_cm -------------------------------------------------------- */

enum { slot_size = 4096, receive_slots = 64, send_area = 256 * 1024 };

/* One registered buffer for everything: receive slots, then a send area. */
static struct ibv_context *context;
static struct ibv_pd *pd;
static uint8_t *memory;
static struct ibv_mr *memory_mr;

static void open_memory(struct ibv_context *verbs) {
    if (pd != NULL)
        return;
    context = verbs;
    pd = ibv_alloc_pd(verbs);
    if (pd == NULL)
        fail("ibv_alloc_pd: %s", strerror(errno));
    size_t bytes = 2 * (size_t)receive_slots * slot_size + send_area;
    memory = aligned_alloc(4096, bytes);
    if (memory == NULL)
        fail("aligned_alloc(%zu)", bytes);
    memset(memory, 0, bytes);
    memory_mr = ibv_reg_mr(pd, memory, bytes,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    if (memory_mr == NULL)
        fail("ibv_reg_mr(%zu bytes): %s", bytes, strerror(errno));
}

typedef struct {
    const char *name;  // "data QP", "control QP"
    struct rdma_event_channel *channel;
    struct rdma_cm_id *id;
    struct ibv_qp *qp;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    int slot_base;  // which half of the receive slots
    /* The last event's private data (an accept's reply, a reject's refusal). */
    uint8_t private_data[256];
    uint8_t private_data_len;
} link_t;

static struct sockaddr_in target;  // HOST:PORT from the command line

static struct sockaddr_in resolve(const char *host_port) {
    struct sockaddr_in out;
    const char *why = resolve_host_port(host_port, &out);
    if (why != NULL)
        fail("%s", why);
    return out;
}

/* The next event of `l` within `timeout_ms`: its type, or -1 on timeout.
 * Copies the private data; acknowledges the event. */
static int next_event(link_t *l, int timeout_ms, int *status) {
    struct pollfd p = {l->channel->fd, POLLIN, 0};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0)
        return -1;
    struct rdma_cm_event *e = NULL;
    if (rdma_get_cm_event(l->channel, &e) != 0)
        fail("rdma_get_cm_event(%s): %s", l->name, strerror(errno));
    int type = (int)e->event;
    if (status != NULL)
        *status = e->status;
    l->private_data_len = e->param.conn.private_data_len;
    if (e->param.conn.private_data != NULL && l->private_data_len > 0)
        memcpy(l->private_data, e->param.conn.private_data, l->private_data_len);
    else
        l->private_data_len = 0;
    rdma_ack_cm_event(e);
    return type;
}

static void expect_event(link_t *l, int wanted, int timeout_ms, const char *step) {
    int status = 0;
    int got = next_event(l, timeout_ms, &status);
    if (got != wanted)
        fail("%s (%s): expected %s, got %s (status %d)", step, l->name, rdma_event_str((enum rdma_cm_event_type)wanted),
             got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got), status);
}

static void post_receives(struct ibv_qp *qp, int first, int count);

/* Resolves the target and makes a QP on the id (librdmacm then drives it
 * to RTS on the accept, and answers with the RTU itself). */
static void cm_open(link_t *l, const char *name) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->channel = rdma_create_event_channel();
    if (l->channel == NULL)
        fail("rdma_create_event_channel: %s", strerror(errno));
    if (rdma_create_id(l->channel, &l->id, NULL, RDMA_PS_TCP) != 0)
        fail("rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(l->id, NULL, (struct sockaddr *)&target, 2000) != 0)
        fail("rdma_resolve_addr: %s", strerror(errno));
    expect_event(l, RDMA_CM_EVENT_ADDR_RESOLVED, 5000, "resolving the address");
    if (rdma_resolve_route(l->id, 2000) != 0)
        fail("rdma_resolve_route: %s", strerror(errno));
    expect_event(l, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000, "resolving the route");
    open_memory(l->id->verbs);
    l->send_cq = ibv_create_cq(l->id->verbs, 256, NULL, NULL, 0);
    l->recv_cq = ibv_create_cq(l->id->verbs, 256, NULL, NULL, 0);
    if (l->send_cq == NULL || l->recv_cq == NULL)
        fail("ibv_create_cq: %s", strerror(errno));
    struct ibv_qp_init_attr attr = rc_qp_attr(l->send_cq, l->recv_cq, 128, receive_slots);
    if (rdma_create_qp(l->id, pd, &attr) != 0)
        fail("rdma_create_qp: %s", strerror(errno));
    l->qp = l->id->qp;
}

/* rdma_connect with `private_data`; returns the event that answers it. */
static int cm_connect(link_t *l, const void *private_data, uint8_t length) {
    struct rdma_conn_param param = {0};
    param.private_data = private_data;
    param.private_data_len = length;
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_connect(l->id, &param) != 0)
        fail("rdma_connect(%s): %s", l->name, strerror(errno));
    int status = 0;
    return next_event(l, 15000, &status);
}

/* cordma's cm_hello (16 bytes, little-endian): magic "CDMA", version 1,
 * kind (1 data, 2 control), mtu 0 (no preference), reserved, token. */
static void cm_hello(uint8_t out[16], uint8_t kind, uint64_t token) {
    le32(out, 0x43444d41);
    out[4] = 1;
    out[5] = kind;
    out[6] = 0;
    out[7] = 0;
    le64(out + 8, token);
}

/* The data QP and the agent's control QP, paired by the hello's token, as
 * a cordma client with the agent connects. */
static void agent_connect(link_t *data, link_t *control) {
    uint64_t token = random64() | 1;
    uint8_t hello[16];
    cm_open(data, "data QP");
    // Receives first: the server may send the moment it has accepted (a
    // stream's hello, the agent's answers).
    post_receives(data->qp, 0, receive_slots / 2);
    cm_hello(hello, 1, token);
    int got = cm_connect(data, hello, sizeof hello);
    if (got != RDMA_CM_EVENT_ESTABLISHED)
        fail("connecting the data QP: expected ESTABLISHED, got %s",
             got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got));
    uint32_t reply = 0;
    if (data->private_data_len >= 4)
        reply = get_le32(data->private_data);
    if (reply != 0x43444d52)
        fail("the accept carries no cm_reply (magic 0x%08x): not a cordma listener with the agent", reply);
    cm_open(control, "control QP");
    control->slot_base = receive_slots / 2;
    post_receives(control->qp, control->slot_base, receive_slots / 2);
    cm_hello(hello, 2, token);
    got = cm_connect(control, hello, sizeof hello);
    if (got != RDMA_CM_EVENT_ESTABLISHED)
        fail("connecting the control QP: expected ESTABLISHED, got %s",
             got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got));
}

/* ---- verbs ---------------------------------------------------------- */

static uint8_t *receive_slot(int i) { return memory + (size_t)i * slot_size; }
static uint8_t *send_buffer(void) { return memory + 2 * (size_t)receive_slots * slot_size; }

static void post_receives(struct ibv_qp *qp, int first, int count) {
    for (int i = first; i < first + count; ++i) {
        struct ibv_sge sge = {(uintptr_t)receive_slot(i), slot_size, memory_mr->lkey};
        struct ibv_recv_wr wr = {0}, *bad = NULL;
        wr.wr_id = (uint64_t)i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (ibv_post_recv(qp, &wr, &bad) != 0)
            fail("ibv_post_recv: %s", strerror(errno));
    }
}

/* One completion from `cq` within `timeout_ms`; 0 if none came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms) {
    int64_t until = now_ms() + timeout_ms;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0)
            fail("ibv_poll_cq: %d", n);
        if (n == 1)
            return 1;
        if (now_ms() > until)
            return 0;
        pause_ms(1);
    }
}

/* Posts one SEND of `length` bytes from the send area (`bytes` copied there
 * first unless it is the send area already). Returns the completion status,
 * or -1 if no completion came within 10 s. */
static int send_message(struct ibv_qp *qp, struct ibv_cq *cq, const uint8_t *bytes, size_t length) {
    uint8_t *at = send_buffer();
    if (bytes != at)
        memcpy(at, bytes, length);
    struct ibv_sge sge = {(uintptr_t)at, (uint32_t)length, memory_mr->lkey};
    struct ibv_send_wr wr = {0}, *bad = NULL;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_send(qp, &wr, &bad) != 0)
        fail("ibv_post_send(SEND, %zu bytes): %s", length, strerror(errno));
    struct ibv_wc wc;
    if (!poll_one(cq, &wc, 10000))
        return -1;
    return wc.status;
}

/* An RDMA WRITE (or READ) of `length` bytes of the send area to remote
 * `address` under `rkey`: the completion status, -1 if none within 10 s. */
static int rdma_op(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, uint64_t address, uint32_t rkey,
                   uint32_t length) {
    struct ibv_sge sge = {(uintptr_t)send_buffer(), length, memory_mr->lkey};
    struct ibv_send_wr wr = {0}, *bad = NULL;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = address;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp, &wr, &bad) != 0)
        fail("ibv_post_send(RDMA %s): %s", op == IBV_WR_RDMA_READ ? "READ" : "WRITE", strerror(errno));
    struct ibv_wc wc;
    if (!poll_one(cq, &wc, 10000))
        return -1;
    return wc.status;
}

static void send_expecting_success(link_t *l, const uint8_t *bytes, size_t length, const char *what) {
    int status = send_message(l->qp, l->send_cq, bytes, length);
    if (status != IBV_WC_SUCCESS)
        fail("sending %s on the %s: %s", what, l->name,
             status < 0 ? "no completion within 10 s" : ibv_wc_status_str((enum ibv_wc_status)status));
    note("sent %s (%zu bytes) on the %s", what, length, l->name);
}

/* The server closed the connection: a DISCONNECTED event on any of the
 * links within `timeout_ms`. */
static void expect_disconnect(link_t *links[], int n, int timeout_ms) {
    int64_t start = now_ms(), until = start + timeout_ms;
    for (;;) {
        struct pollfd p[4];
        for (int i = 0; i < n; ++i)
            p[i] = (struct pollfd){links[i]->channel->fd, POLLIN, 0};
        int left = (int)(until - now_ms());
        if (left <= 0 || poll(p, (nfds_t)n, left) <= 0)
            fail("the server did not close the connection within %d ms", timeout_ms);
        for (int i = 0; i < n; ++i) {
            if (!(p[i].revents & POLLIN))
                continue;
            int status = 0;
            int type = next_event(links[i], 0, &status);
            if (type == RDMA_CM_EVENT_DISCONNECTED) {
                note("the server closed the connection (DISCONNECTED on the %s after %lld ms)", links[i]->name,
                     (long long)(now_ms() - start));
                return;
            }
            if (type >= 0)
                note("event %s on the %s (waiting for the disconnect)", rdma_event_str((enum rdma_cm_event_type)type),
                     links[i]->name);
        }
    }
}

/* The next message on `l`'s receive slots within `timeout_ms`; its length,
 * or -1. */
static int receive_message(link_t *l, uint8_t **at, int timeout_ms) {
    struct ibv_wc wc;
    if (!poll_one(l->recv_cq, &wc, timeout_ms))
        return -1;
    if (wc.status != IBV_WC_SUCCESS)
        fail("a receive on the %s failed: %s", l->name, ibv_wc_status_str(wc.status));
    *at = receive_slot((int)wc.wr_id);
    return (int)wc.byte_len;
}

/* ---- agent scenarios ------------------------------------------------ */

/* The server's next agent message of `type`, skipping bare acks. */
static uint8_t *agent_expect(link_t *control, uint8_t type, int *length) {
    for (;;) {
        uint8_t *m = NULL;
        int n = receive_message(control, &m, 10000);
        if (n < 0)
            fail("no agent message from the server within 10 s (waiting for type %u)", type);
        if (n < 8 || get_le16(m) != 0x4341)
            fail("the server sent a malformed agent message (%d bytes)", n);
        if (m[3] == agent_ack)
            continue;
        if (m[3] != type)
            fail("expected agent message type %u, got type %u", type, m[3]);
        *length = n;
        return m;
    }
}

typedef struct {
    uint64_t region_id, address, length;
    uint32_t rkey;
} grant_t;

static grant_t agent_request_grant(link_t *control, uint32_t id, uint64_t size) {
    uint8_t m[64];
    size_t n = agent_request_mr(m, id, size, 64, 0x2 | 0x4);
    send_expecting_success(control, m, n, "request_mr");
    int length = 0;
    uint8_t *g = agent_expect(control, agent_grant, &length);
    grant_t out = {get_le64(g + 12), get_le64(g + 20), get_le64(g + 28), get_le32(g + 36)};
    if (get_le32(g + 8) != id)
        fail("the grant answers request %u, not %u", get_le32(g + 8), id);
    note("granted region %llu: %llu bytes at 0x%llx, rkey 0x%x", (unsigned long long)out.region_id,
         (unsigned long long)out.length, (unsigned long long)out.address, out.rkey);
    return out;
}

/* Sends `bytes` on the control QP of a fresh agent connection and expects
 * the server to close that connection. */
static void agent_violation(const uint8_t *bytes, size_t length, const char *what) {
    link_t data, control;
    agent_connect(&data, &control);
    int status = send_message(control.qp, control.send_cq, bytes, length);
    note("sent %s (%zu bytes) on the control QP: %s", what, length,
         status < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)status));
    link_t *links[] = {&data, &control};
    expect_disconnect(links, 2, 15000);
}

static int agent_scenario(const char *name) {
    uint8_t m[2048];
    memset(m, 0, sizeof m);
    if (strcmp(name, "agent-truncated") == 0) {
        agent_header(m, agent_request, 24, 0);
        agent_violation(m, 5, "5 bytes of a request_mr header");
    } else if (strcmp(name, "agent-bad-magic") == 0) {
        agent_header(m, agent_ack, 0, 0);
        le16(m, 0x1234);
        agent_violation(m, 8, "an ack with magic 0x1234");
    } else if (strcmp(name, "agent-bad-version") == 0) {
        agent_header(m, agent_ack, 0, 0);
        m[2] = 7;
        agent_violation(m, 8, "an ack of version 7");
    } else if (strcmp(name, "agent-unknown-type") == 0) {
        agent_header(m, 9, 0, 0);
        agent_violation(m, 8, "a message of type 9");
    } else if (strcmp(name, "agent-bad-length") == 0) {
        agent_request_mr(m, 1, 4096, 64, 0x2);
        agent_violation(m, 28, "a request_mr whose header says 24 body bytes, with 20");
    } else if (strcmp(name, "agent-oversize") == 0) {
        // Longer than the server's 256-byte receive buffers: the receive
        // itself fails on the server's device.
        agent_header(m, agent_deny, 1016, 0);
        memset(m + 8, 'x', 1016);
        agent_violation(m, 1024, "a 1024-byte message (the receives hold 256)");
    } else if (strcmp(name, "agent-size-zero") == 0) {
        agent_violation(m, agent_request_mr(m, 1, 0, 64, 0x2), "request_mr for 0 bytes");
    } else if (strcmp(name, "agent-size-2^40+1") == 0) {
        agent_violation(m, agent_request_mr(m, 1, (1ull << 40) + 1, 64, 0x2), "request_mr for 2^40+1 bytes");
    } else if (strcmp(name, "agent-size-2^63") == 0) {
        agent_violation(m, agent_request_mr(m, 1, 1ull << 63, 64, 0x2), "request_mr for 2^63 bytes");
    } else if (strcmp(name, "agent-bad-alignment") == 0) {
        agent_violation(m, agent_request_mr(m, 1, 4096, 3, 0x2), "request_mr with alignment 3");
    } else if (strcmp(name, "agent-huge-alignment") == 0) {
        agent_violation(m, agent_request_mr(m, 1, 4096, 1u << 20, 0x2), "request_mr with alignment 2^20");
    } else if (strcmp(name, "agent-request-id-zero") == 0) {
        agent_violation(m, agent_request_mr(m, 0, 4096, 64, 0x2), "request_mr with request_id 0");
    } else if (strcmp(name, "agent-bad-access") == 0) {
        agent_violation(m, agent_request_mr(m, 1, 4096, 64, 0x1 | 0x100), "request_mr with access 0x101");
    } else if (strcmp(name, "agent-release-never-granted") == 0) {
        agent_header(m, agent_release, 2 + 16, 0);
        le16(m + 8, 2);
        le64(m + 10, 4242);
        le64(m + 18, 1ull << 62);
        agent_violation(m, 26, "release_mr of regions 4242 and 2^62, never granted");
    } else if (strcmp(name, "agent-return-never-granted") == 0) {
        agent_header(m, agent_return, 8, 0);
        le64(m + 8, 4242);
        agent_violation(m, 16, "return_mr of region 4242, never granted");
    } else if (strcmp(name, "agent-ack-beyond") == 0) {
        agent_header(m, agent_ack, 0, 5);
        agent_violation(m, 8, "an ack of 5 messages when the server sent none");
    } else if (strcmp(name, "agent-grant-unasked") == 0) {
        agent_header(m, agent_grant, 40, 0);
        le32(m + 8, 77);         // request_id never sent by the server
        le64(m + 12, 1);         // region_id
        le64(m + 20, 0x10000);   // address
        le64(m + 28, 4096);      // length
        le32(m + 36, 0x1234);    // rkey
        le32(m + 40, 1000);      // lease_ms
        le32(m + 44, 0x2);       // access
        agent_violation(m, 48, "grant_mr answering request 77, which the server never made");
    } else if (strcmp(name, "agent-size-limit") == 0) {
        // Valid on the wire, over the server's agent_limits: refused with
        // a deny, and the connection stays up (not a violation).
        link_t data, control;
        agent_connect(&data, &control);
        send_expecting_success(&control, m, agent_request_mr(m, 9, 1ull << 40, 4096, 0x2), "request_mr for 2^40 bytes");
        int length = 0;
        uint8_t *d = agent_expect(&control, agent_deny, &length);
        char reason[256] = {0};
        uint16_t reason_length = get_le16(d + 16);
        memcpy(reason, d + 18, reason_length < 255 ? reason_length : 255);
        if (get_le32(d + 8) != 9 || get_le32(d + 12) != EOVERFLOW)
            fail("expected deny_mr{request 9, code EOVERFLOW}, got request %u code %u", get_le32(d + 8),
                 get_le32(d + 12));
        note("denied as expected: code %u, \"%s\"", get_le32(d + 12), reason);
        // Still up: a small request is granted.
        agent_request_grant(&control, 10, 4096);
    } else if (strcmp(name, "agent-flood") == 0) {
        // 300 requests back to back, never acknowledging the answers: the
        // server grants up to its agent_limits::max_regions (64), denies
        // the rest, and queues what its window to us has no room for. We
        // then leave: every grant must be freed (the resource counts).
        link_t data, control;
        agent_connect(&data, &control);
        uint8_t *at = send_buffer();
        for (uint32_t i = 1; i <= 300; ++i) {
            size_t n = agent_request_mr(at, i, 4096, 64, 0x2);
            int status = send_message(control.qp, control.send_cq, at, n);
            if (status != IBV_WC_SUCCESS)
                fail("request %u of the flood: %s", i,
                     status < 0 ? "no completion within 10 s" : ibv_wc_status_str((enum ibv_wc_status)status));
        }
        int answers = 0, grants = 0;
        uint8_t *r = NULL;
        while (receive_message(&control, &r, 2000) > 0) {
            if (r[3] == agent_ack)
                continue;
            ++answers;
            grants += r[3] == agent_grant;
        }
        note("300 requests sent; %d answers came (%d grants) with nothing acknowledged", answers, grants);
        if (answers == 0 || answers > 16)
            fail("expected 1 to 16 answers (the server's window) without acknowledging, got %d", answers);
    } else {
        return 0;
    }
    return 1;
}

/* ---- forged rkeys ----------------------------------------------------- */

static void expect_access_error(int status, const char *what) {
    if (status == IBV_WC_SUCCESS)
        fail("%s succeeded: the server's memory took a forged access", what);
    if (status < 0)
        fail("%s: no completion within 10 s", what);
    note("%s failed on this side as expected: %s", what, ibv_wc_status_str((enum ibv_wc_status)status));
}

/* After a refused access, whether the server's side of the connection
 * goes too (its responder QP in error), for the record: up to 5 s. */
static void report_server_side(link_t *l) {
    int64_t start = now_ms();
    int status = 0;
    int got = next_event(l, 5000, &status);
    if (got == RDMA_CM_EVENT_DISCONNECTED)
        note("the server closed the connection too, %lld ms later", (long long)(now_ms() - start));
    else
        note("the server kept its side of the connection for 5 s (%s)",
             got < 0 ? "no event" : rdma_event_str((enum rdma_cm_event_type)got));
}

static int forged_scenario(const char *name) {
    if (strcmp(name, "forged-rkey") == 0) {
        // An rkey the server never gave out, on the data QP.
        link_t data, control;
        agent_connect(&data, &control);
        memset(send_buffer(), 0xee, 64);
        expect_access_error(rdma_op(data.qp, data.send_cq, IBV_WR_RDMA_WRITE, 0x10000, 0x1badcafe, 64),
                            "RDMA WRITE to 0x10000 with rkey 0x1badcafe");
        report_server_side(&data);
    } else if (strcmp(name, "forged-beyond-grant") == 0) {
        // A real grant, written inside (allowed) and just past its end.
        link_t data, control;
        agent_connect(&data, &control);
        grant_t g = agent_request_grant(&control, 1, 4096);
        memset(send_buffer(), 0x5a, 64);
        int status = rdma_op(data.qp, data.send_cq, IBV_WR_RDMA_WRITE, g.address, g.rkey, 64);
        if (status != IBV_WC_SUCCESS)
            fail("a write inside the grant failed: %s", status < 0 ? "no completion" : ibv_wc_status_str(status));
        note("a write inside the grant succeeded");
        expect_access_error(rdma_op(data.qp, data.send_cq, IBV_WR_RDMA_WRITE, g.address + g.length, g.rkey, 64),
                            "RDMA WRITE of 64 bytes just past the grant's end");
        report_server_side(&data);
    } else if (strcmp(name, "forged-after-release") == 0) {
        // A grant's rkey after its release: the server deregistered it.
        link_t data, control;
        agent_connect(&data, &control);
        grant_t g = agent_request_grant(&control, 1, 4096);
        uint8_t m[32];
        agent_header(m, agent_release, 10, 0);
        le16(m + 8, 1);
        le64(m + 10, g.region_id);
        send_expecting_success(&control, m, 18, "release_mr of the grant");
        // Messages are handled in order: once this second grant arrives,
        // the release has been handled and the first rkey is dead.
        agent_request_grant(&control, 2, 4096);
        memset(send_buffer(), 0x77, 64);
        expect_access_error(rdma_op(data.qp, data.send_cq, IBV_WR_RDMA_WRITE, g.address, g.rkey, 64),
                            "RDMA WRITE with the released grant's rkey");
        report_server_side(&data);
    } else {
        return 0;
    }
    return 1;
}

/* ---- rdma_cm hello scenarios ---------------------------------------- */

static void expect_rejected(link_t *l, int got, const char *what) {
    if (got != RDMA_CM_EVENT_REJECTED)
        fail("%s: expected REJECTED, got %s", what, got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got));
    uint32_t magic = 0;
    if (l->private_data_len >= 8)
        magic = get_le32(l->private_data);
    note("%s: REJECTED%s", what, magic == 0x43444d4e ? " with cordma's refusal" : "");
}

static int cm_scenario(const char *name) {
    uint8_t hello[16];
    link_t l;
    if (strcmp(name, "cm-bad-magic") == 0) {
        cm_hello(hello, 1, random64() | 1);
        memset(hello, 0x11, 4);
        cm_open(&l, "data QP");
        expect_rejected(&l, cm_connect(&l, hello, 16), "a hello with magic 0x11111111");
    } else if (strcmp(name, "cm-short") == 0) {
        cm_hello(hello, 1, random64() | 1);
        cm_open(&l, "data QP");
        expect_rejected(&l, cm_connect(&l, hello, 7), "7 bytes of a hello");
    } else if (strcmp(name, "cm-bad-kind") == 0) {
        cm_hello(hello, 9, random64() | 1);
        cm_open(&l, "data QP");
        expect_rejected(&l, cm_connect(&l, hello, 16), "a hello of kind 9");
    } else if (strcmp(name, "cm-unknown-token") == 0) {
        // A control QP for a data QP that was never connected.
        cm_hello(hello, 2, random64() | 1);
        cm_open(&l, "control QP");
        expect_rejected(&l, cm_connect(&l, hello, 16), "a control QP hello with an unknown token");
    } else if (strcmp(name, "cm-no-rtu") == 0) {
        // A valid data hello whose accept is never answered (no RTU): the
        // server's half of the handshake must give up on its own, and hold
        // up no other client meanwhile.
        memset(&l, 0, sizeof l);
        l.name = "data QP";
        l.channel = rdma_create_event_channel();
        if (l.channel == NULL || rdma_create_id(l.channel, &l.id, NULL, RDMA_PS_TCP) != 0)
            fail("rdma_create_id: %s", strerror(errno));
        if (rdma_resolve_addr(l.id, NULL, (struct sockaddr *)&target, 2000) != 0)
            fail("rdma_resolve_addr: %s", strerror(errno));
        expect_event(&l, RDMA_CM_EVENT_ADDR_RESOLVED, 5000, "resolving the address");
        if (rdma_resolve_route(l.id, 2000) != 0)
            fail("rdma_resolve_route: %s", strerror(errno));
        expect_event(&l, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000, "resolving the route");
        // No QP on the id: librdmacm then leaves the RTU to us.
        open_memory(l.id->verbs);
        struct ibv_cq *cq = ibv_create_cq(l.id->verbs, 16, NULL, NULL, 0);
        struct ibv_qp_init_attr attr = rc_qp_attr(cq, cq, 4, 4);
        struct ibv_qp *qp = cq != NULL ? ibv_create_qp(pd, &attr) : NULL;
        if (qp == NULL)
            fail("ibv_create_qp: %s", strerror(errno));
        cm_hello(hello, 1, random64() | 1);
        struct rdma_conn_param param = {0};
        param.private_data = hello;
        param.private_data_len = sizeof hello;
        param.responder_resources = param.initiator_depth = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        param.qp_num = qp->qp_num;
        if (rdma_connect(l.id, &param) != 0)
            fail("rdma_connect: %s", strerror(errno));
        expect_event(&l, RDMA_CM_EVENT_CONNECT_RESPONSE, 15000, "waiting for the accept");
        note("the server accepted; never answering it (no RTU), then nothing");
        int status = 0;
        int got = next_event(&l, 25000, &status);
        note("after that: %s (status %d)",
             got < 0 ? "no event within 25 s" : rdma_event_str((enum rdma_cm_event_type)got), status);
    } else if (strcmp(name, "cm-data-only") == 0) {
        // A data QP whose control QP never follows: the server keeps it
        // until we leave, and must then free everything.
        cm_hello(hello, 1, random64() | 1);
        cm_open(&l, "data QP");
        int got = cm_connect(&l, hello, 16);
        if (got != RDMA_CM_EVENT_ESTABLISHED)
            fail("expected ESTABLISHED, got %s", got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got));
        note("connected the data QP; leaving without a control QP");
    } else {
        return 0;
    }
    return 1;
}

/* ---- TCP endpoint exchange ------------------------------------------ */

static int tcp_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&target, sizeof target) != 0)
        fail("connect(TCP %s:%d): %s", inet_ntoa(target.sin_addr), ntohs(target.sin_port), strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void write_all(int fd, const void *bytes, size_t length) {
    const uint8_t *p = bytes;
    while (length > 0) {
        ssize_t n = write(fd, p, length);
        if (n <= 0)
            fail("write to the TCP socket: %s", n < 0 ? strerror(errno) : "closed");
        p += n;
        length -= (size_t)n;
    }
}

/* Reads exactly `length` bytes within `timeout_ms`; 0 if the socket ended
 * or the time ran out first. */
static int read_exactly(int fd, uint8_t *out, size_t length, int timeout_ms) {
    int64_t until = now_ms() + timeout_ms;
    size_t got = 0;
    while (got < length) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(until - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return 0;
        ssize_t n = read(fd, out + got, length - got);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    return 1;
}

/* The server closes the socket (EOF or a reset) within `timeout_ms`,
 * whatever it sends before. */
static void expect_eof(int fd, int timeout_ms) {
    int64_t start = now_ms(), until = start + timeout_ms;
    uint8_t sink[256];
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(until - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            fail("the server did not close the TCP connection within %d ms", timeout_ms);
        ssize_t n = read(fd, sink, sizeof sink);
        if (n <= 0) {
            note("the server closed the TCP connection after %lld ms (%s)", (long long)(now_ms() - start),
                 n == 0 ? "EOF" : strerror(errno));
            return;
        }
    }
}

typedef struct {
    uint16_t lid;
    uint32_t qpn, psn;
    uint8_t gid[16];
    uint8_t mtu, flags;
    uint16_t private_data_length;
} endpoint_t;

static void encode_endpoint(uint8_t out[36], const endpoint_t *e) {
    memset(out, 0, 36);
    le32(out, 0x4352444d);
    le16(out + 4, 1);
    le16(out + 6, e->lid);
    le32(out + 8, e->qpn);
    le32(out + 12, e->psn);
    memcpy(out + 16, e->gid, 16);
    out[32] = e->mtu;
    out[33] = e->flags;
    le16(out + 34, e->private_data_length);
}

static endpoint_t decode_endpoint(const uint8_t in[36]) {
    endpoint_t e;
    if (get_le32(in) != 0x4352444d)
        fail("the server's endpoint message has magic 0x%08x", get_le32(in));
    e.lid = get_le16(in + 6);
    e.qpn = get_le32(in + 8);
    e.psn = get_le32(in + 12);
    memcpy(e.gid, in + 16, 16);
    e.mtu = in[32];
    e.flags = in[33];
    e.private_data_length = get_le16(in + 34);
    return e;
}

/* A QP of our own for the TCP exchange, driven by hand. */
typedef struct {
    struct ibv_qp *qp;
    struct ibv_cq *send_cq, *recv_cq;
    endpoint_t ours;
} raw_qp_t;

static int gid_index = -1;
static uint8_t local_gid[16];
static enum ibv_mtu active_mtu;

static void open_device(void) {
    if (context != NULL)
        return;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n == 0)
        fail("no RDMA device");
    struct ibv_context *verbs = ibv_open_device(list[0]);
    if (verbs == NULL)
        fail("ibv_open_device(%s): %s", ibv_get_device_name(list[0]), strerror(errno));
    ibv_free_device_list(list);
    open_memory(verbs);
    struct ibv_port_attr port;
    if (ibv_query_port(verbs, 1, &port) != 0)
        fail("ibv_query_port: %s", strerror(errno));
    active_mtu = port.active_mtu;
    // The RoCE v2 GID of an IPv4 address, as cordma picks by default.
    for (int i = 0; i < port.gid_tbl_len && gid_index < 0; ++i) {
        struct ibv_gid_entry entry;
        if (ibv_query_gid_ex(verbs, 1, (uint32_t)i, &entry, 0) != 0)
            continue;
        static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (entry.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(entry.gid.raw, v4_mapped, 12) == 0) {
            gid_index = i;
            memcpy(local_gid, entry.gid.raw, 16);
        }
    }
    if (gid_index < 0)
        fail("no RoCE v2 IPv4 GID on port 1");
}

static raw_qp_t raw_qp(void) {
    open_device();
    raw_qp_t q;
    memset(&q, 0, sizeof q);
    q.send_cq = ibv_create_cq(context, 256, NULL, NULL, 0);
    q.recv_cq = ibv_create_cq(context, 256, NULL, NULL, 0);
    struct ibv_qp_init_attr attr = rc_qp_attr(q.send_cq, q.recv_cq, 64, receive_slots);
    q.qp = ibv_create_qp(pd, &attr);
    if (q.qp == NULL)
        fail("ibv_create_qp: %s", strerror(errno));
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(q.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        fail("ibv_modify_qp(INIT): %s", strerror(errno));
    q.ours.qpn = q.qp->qp_num;
    q.ours.psn = (uint32_t)random64() & 0xffffff;
    memcpy(q.ours.gid, local_gid, 16);
    q.ours.mtu = (uint8_t)active_mtu;
    return q;
}

static void raw_connect(raw_qp_t *q, const endpoint_t *theirs) {
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = theirs->mtu < q->ours.mtu ? (enum ibv_mtu)theirs->mtu : (enum ibv_mtu)q->ours.mtu;
    a.dest_qp_num = theirs->qpn;
    a.rq_psn = theirs->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, theirs->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.dlid = theirs->lid;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
        fail("ibv_modify_qp(RTR): %s", strerror(errno));
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = q->ours.psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                     IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        fail("ibv_modify_qp(RTS): %s", strerror(errno));
}

/* A well-formed endpoint message with one field spoiled by `spoil`. */
static void bad_endpoint(const char *what, void (*spoil)(uint8_t *)) {
    int fd = tcp_connect();
    endpoint_t e = {0, 0x1234, 0x42, {0}, 5, 0, 0};
    e.gid[10] = 0xff;
    e.gid[11] = 0xff;
    e.gid[15] = 2;
    uint8_t m[36];
    encode_endpoint(m, &e);
    spoil(m);
    write_all(fd, m, sizeof m);
    note("sent an endpoint message with %s", what);
    expect_eof(fd, 15000);
}

static void spoil_qpn(uint8_t *m) { le32(m + 8, 0); }
static void spoil_mtu(uint8_t *m) { m[32] = 9; }
static void spoil_flags(uint8_t *m) { m[33] = 0x80; }
static void spoil_agent(uint8_t *m) { m[33] = 1; }
static void spoil_version(uint8_t *m) { le16(m + 4, 9); }

static int tcp_scenario(const char *name) {
    if (strcmp(name, "tcp-garbage") == 0) {
        int fd = tcp_connect();
        uint8_t m[36];
        memset(m, 0xab, sizeof m);
        write_all(fd, m, sizeof m);
        note("sent 36 bytes of 0xab");
        expect_eof(fd, 15000);
    } else if (strcmp(name, "tcp-short") == 0) {
        int fd = tcp_connect();
        uint8_t m[36];
        endpoint_t e = {0, 0x1234, 0x42, {0}, 5, 0, 0};
        encode_endpoint(m, &e);
        write_all(fd, m, 10);
        shutdown(fd, SHUT_WR);
        note("sent 10 of the endpoint message's 36 bytes, then EOF");
        expect_eof(fd, 15000);
    } else if (strcmp(name, "tcp-stall") == 0) {
        // Half a message, then silence with the socket open: the server's
        // connect_timeout must end it.
        int fd = tcp_connect();
        uint8_t m[36];
        endpoint_t e = {0, 0x1234, 0x42, {0}, 5, 0, 0};
        encode_endpoint(m, &e);
        write_all(fd, m, 10);
        note("sent 10 of the endpoint message's 36 bytes, then nothing");
        expect_eof(fd, 30000);
    } else if (strcmp(name, "tcp-bad-version") == 0) {
        bad_endpoint("version 9", spoil_version);
    } else if (strcmp(name, "tcp-bad-qpn") == 0) {
        bad_endpoint("qpn 0", spoil_qpn);
    } else if (strcmp(name, "tcp-bad-mtu") == 0) {
        bad_endpoint("mtu code 9", spoil_mtu);
    } else if (strcmp(name, "tcp-bad-flags") == 0) {
        bad_endpoint("flags 0x80", spoil_flags);
    } else if (strcmp(name, "tcp-agent-mismatch") == 0) {
        bad_endpoint("flags bit 0 (no agent) to a listener with the agent", spoil_agent);
    } else if (strcmp(name, "tcp-bad-control") == 0 || strcmp(name, "tcp-bad-ready") == 0 ||
               strcmp(name, "tcp-agent-garbage") == 0) {
        // A real exchange, spoiled at the control endpoint, at the ready
        // byte, or (after it) by an agent message of garbage.
        int fd = tcp_connect();
        raw_qp_t data = raw_qp(), control = raw_qp();
        uint8_t m[72];
        encode_endpoint(m, &data.ours);
        encode_endpoint(m + 36, &control.ours);
        if (strcmp(name, "tcp-bad-control") == 0)
            memset(m + 36, 0xcd, 36);
        write_all(fd, m, sizeof m);
        uint8_t theirs[72];
        if (!read_exactly(fd, theirs, 36, 10000))
            fail("no endpoint message from the server");
        if (strcmp(name, "tcp-bad-control") == 0) {
            note("sent a good data endpoint and 36 bytes of 0xcd for the control endpoint");
            expect_eof(fd, 15000);
            return 1;
        }
        if (!read_exactly(fd, theirs + 36, 36, 10000))
            fail("no control endpoint message from the server");
        endpoint_t d = decode_endpoint(theirs), c = decode_endpoint(theirs + 36);
        raw_connect(&data, &d);
        raw_connect(&control, &c);
        post_receives(control.qp, 0, 16);
        uint8_t ready = strcmp(name, "tcp-bad-ready") == 0 ? 'X' : 'R';
        write_all(fd, &ready, 1);
        if (ready == 'X') {
            note("sent ready byte 'X' after a good exchange");
            expect_eof(fd, 15000);
            return 1;
        }
        uint8_t their_ready = 0;
        if (!read_exactly(fd, &their_ready, 1, 10000) || their_ready != 'R')
            fail("no ready byte from the server");
        uint8_t bad[8];
        agent_header(bad, agent_ack, 0, 0);
        le16(bad, 0xdead);
        int status = send_message(control.qp, control.send_cq, bad, sizeof bad);
        note("connected over TCP; sent an agent message with magic 0xdead: %s",
             status < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)status));
        expect_eof(fd, 15000);
    } else {
        return 0;
    }
    return 1;
}

/* ---- cordma::rpc (little-endian headers, version 2: 16 bytes for an inline
 * request or response, 48 for every other frame; rpc_wire.hpp) ---------- */

enum { rpc_hello = 1, rpc_request = 2, rpc_request_rts = 3, rpc_response = 4, rpc_done = 6, rpc_credit = 7 };

/* Writes the header of a frame of `type` at p; returns its length (16 for a
 * request or response, whose payload's size is the rest of the frame and
 * which has no size, address or key; 48 otherwise). */
static size_t rpc_header(uint8_t *p, uint8_t type, uint64_t id, uint32_t code, uint64_t size, uint64_t addr,
                         uint32_t rkey) {
    memset(p, 0, 48);
    le16(p, 0x5052);
    p[2] = 2;
    p[3] = type;
    if (type == rpc_request || type == rpc_response) {
        le32(p + 8, (uint32_t)id);
        le32(p + 12, code);
        return 16;
    }
    le64(p + 8, id);
    le32(p + 16, code);
    le64(p + 24, size);
    le64(p + 32, addr);
    le32(p + 40, rkey);
    return 48;
}

typedef struct {
    uint32_t credits;
    uint64_t eager, max_request, heartbeat_addr;
    uint32_t heartbeat_rkey;
} rpc_server_hello_t;

/* A plain rdma_cm connection carrying `hello` (nothing of the agent's). */
static rpc_server_hello_t rpc_connect(link_t *l, const uint8_t *hello, uint8_t length) {
    cm_open(l, "data QP");
    post_receives(l->qp, 0, 32);
    int got = cm_connect(l, hello, length);
    if (got != RDMA_CM_EVENT_ESTABLISHED)
        fail("connecting to the rpc server: expected ESTABLISHED, got %s",
             got < 0 ? "nothing" : rdma_event_str((enum rdma_cm_event_type)got));
    rpc_server_hello_t h = {0, 0, 0, 0, 0};
    if (l->private_data_len >= 48) {
        const uint8_t *p = l->private_data;
        h.credits = get_le32(p + 4);
        h.heartbeat_addr = get_le64(p + 8);
        h.eager = get_le64(p + 24);
        h.max_request = get_le64(p + 32);
        h.heartbeat_rkey = get_le32(p + 40);
    }
    return h;
}

static rpc_server_hello_t rpc_connect_good(link_t *l) {
    uint8_t hello[48];
    rpc_header(hello, rpc_hello, 0, 2, 4096, 1 << 20, 0); /* code: the protocol version */
    rpc_server_hello_t h = rpc_connect(l, hello, sizeof hello);
    /* A server whose hello defers its credits (code >> 16, bit 0: every
     * cordma server now) grants them in its first frame, a credit frame:
     * a client sends nothing before it. */
    if (l->private_data_len >= 48 && (get_le32(l->private_data + 16) >> 16) & 1) {
        uint8_t *m = NULL;
        int n = receive_message(l, &m, 10000);
        if (n != 48 || m[3] != rpc_credit)
            fail("expected the server's first credit frame, got %d bytes (type %d)", n, n >= 4 ? m[3] : -1);
        h.credits = get_le32(m + 4);
        note("granted %u credits by the server's first credit frame", h.credits);
    }
    return h;
}

static void rpc_violation(const uint8_t *frame, size_t length, const char *what) {
    link_t l;
    rpc_connect_good(&l);
    int status = send_message(l.qp, l.send_cq, frame, length);
    note("sent %s (%zu bytes): %s", what, length,
         status < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)status));
    link_t *links[] = {&l};
    expect_disconnect(links, 1, 15000);
}

static int rpc_scenario(const char *name) {
    uint8_t f[16384];
    memset(f, 0, sizeof f);
    if (strcmp(name, "rpc-no-hello") == 0 || strcmp(name, "rpc-bad-hello") == 0) {
        link_t l;
        uint8_t hello[48];
        memset(hello, 0x5a, sizeof hello);
        bool none = strcmp(name, "rpc-no-hello") == 0;
        rpc_connect(&l, none ? NULL : hello, none ? 0 : 48);
        note("connected with %s", none ? "no private data" : "48 bytes of 0x5a as the hello");
        link_t *links[] = {&l};
        expect_disconnect(links, 1, 15000);
    } else if (strcmp(name, "rpc-short-frame") == 0) {
        rpc_header(f, rpc_request, 1, 1, 0, 0, 0);
        rpc_violation(f, 10, "10 bytes of a request header");
    } else if (strcmp(name, "rpc-bad-magic") == 0) {
        rpc_header(f, rpc_request, 1, 1, 0, 0, 0);
        le16(f, 0xbeef);
        rpc_violation(f, 48, "a request with magic 0xbeef");
    } else if (strcmp(name, "rpc-bad-version") == 0) {
        rpc_header(f, rpc_request, 1, 1, 0, 0, 0);
        f[2] = 9;
        rpc_violation(f, 48, "a request of version 9");
    } else if (strcmp(name, "rpc-unknown-type") == 0) {
        rpc_header(f, 99, 1, 1, 0, 0, 0);
        rpc_violation(f, 48, "a frame of type 99");
    } else if (strcmp(name, "rpc-reserved") == 0) {
        rpc_header(f, rpc_request_rts, 1, 1, 4096, 0x10000, 0x1234);
        f[20] = 1;
        rpc_violation(f, 48, "a request_rts with reserved bytes set");
    } else if (strcmp(name, "rpc-length-mismatch") == 0) {
        rpc_header(f, rpc_done, 1, 0, 0, 0, 0);
        rpc_violation(f, 58, "a done frame (a 48-byte header, no payload) of 58 bytes");
    } else if (strcmp(name, "rpc-oversize") == 0) {
        // Longer than the server's shared receive buffers (eager 4096 + 48).
        size_t n = rpc_header(f, rpc_request, 1, 1, 0, 0, 0);
        rpc_violation(f, n + 8192, "an 8208-byte request (the receives hold 4144)");
    } else if (strcmp(name, "rpc-server-frame") == 0) {
        size_t n = rpc_header(f, rpc_response, 1, 0, 0, 0, 0);
        rpc_violation(f, n, "a response frame, which only a server sends");
    } else if (strcmp(name, "rpc-done-unknown") == 0) {
        rpc_header(f, rpc_done, 42, 0, 0, 0, 0);
        rpc_violation(f, 48, "a done for call 42, which has no response waiting");
    } else if (strcmp(name, "rpc-credit-overrun") == 0) {
        link_t l;
        rpc_server_hello_t h = rpc_connect_good(&l);
        if (h.credits == 0 || h.credits > 64)
            fail("the server's hello grants %u credits", h.credits);
        // Method 3 answers after 2 s: every call holds its credit meanwhile.
        for (uint32_t i = 0; i <= h.credits; ++i) {
            size_t n = rpc_header(f, rpc_request, i + 1, 3, 0, 0, 0);
            int status = send_message(l.qp, l.send_cq, f, n);
            if (status != IBV_WC_SUCCESS)
                break;
        }
        note("sent %u requests at once on %u credits", h.credits + 1, h.credits);
        link_t *links[] = {&l};
        expect_disconnect(links, 1, 15000);
    } else if (strcmp(name, "rpc-rts-too-large") == 0) {
        // A rendezvous request for 2^63 bytes: refused with too_large (3),
        // and the connection stays up.
        link_t l;
        rpc_connect_good(&l);
        rpc_header(f, rpc_request_rts, 1, 1, 1ull << 63, 0x10000, 0x1234);
        send_expecting_success(&l, f, 48, "request_rts for 2^63 bytes");
        uint8_t *r = NULL;
        int n = receive_message(&l, &r, 10000);
        if (n < 16 || r[3] != rpc_response)
            fail("expected a response frame, got %d bytes (type %d)", n, n >= 4 ? r[3] : -1);
        if (get_le32(r + 12) != 3)
            fail("expected the response code too_large (3), got %u", get_le32(r + 12));
        note("answered too_large: \"%.*s\"", n - 16, (const char *)r + 16);
        rpc_header(f, rpc_request, 2, 1, 5, 0, 0);
        memcpy(f + 16, "hello", 5);
        send_expecting_success(&l, f, 21, "an echo request");
        n = receive_message(&l, &r, 10000);
        if (n != 21 || memcmp(r + 16, "hello", 5) != 0)
            fail("the echo after the refusal did not come back (%d bytes)", n);
        note("the connection still serves calls");
    } else if (strcmp(name, "rpc-forged-rts") == 0) {
        // A rendezvous request of 1 MiB whose key is forged: the server's
        // RDMA READ of it fails, which closes this connection alone.
        rpc_header(f, rpc_request_rts, 1, 1, 1 << 20, 0x10000, 0x1badcafe);
        rpc_violation(f, 48, "request_rts for 1 MiB at a forged address and rkey");
    } else if (strcmp(name, "rpc-heartbeat-write") == 0) {
        // The server's liveness word is published read-only: a write fails.
        link_t l;
        rpc_server_hello_t h = rpc_connect_good(&l);
        memset(send_buffer(), 0xff, 8);
        int status = rdma_op(l.qp, l.send_cq, IBV_WR_RDMA_READ, h.heartbeat_addr, h.heartbeat_rkey, 8);
        if (status != IBV_WC_SUCCESS)
            fail("reading the liveness word failed: %s", status < 0 ? "no completion" : ibv_wc_status_str(status));
        note("read the liveness word at 0x%llx (allowed)", (unsigned long long)h.heartbeat_addr);
        expect_access_error(rdma_op(l.qp, l.send_cq, IBV_WR_RDMA_WRITE, h.heartbeat_addr, h.heartbeat_rkey, 8),
                            "RDMA WRITE to the read-only liveness word");
        report_server_side(&l);
    } else {
        return 0;
    }
    return 1;
}

/* ---- cordma::stream (the link's headers, version 2: 24 bytes for a data
 * frame, its payload's size the rest; 48 for every other; link_wire.hpp) */

enum { link_hello = 1, link_data = 2, link_rts = 3, link_credit = 5 };
#define STREAM_MARK 0x5354524d00000001ull
#define C_API_MARK 0x4341504900000001ull

static void link_header(uint8_t *p, uint8_t type, uint8_t op, uint32_t seq, uint32_t acked, uint32_t extra,
                        uint64_t size, uint64_t addr, uint32_t rkey) {
    memset(p, 0, 48);
    le16(p, 0x4347);
    p[2] = type;
    p[3] = op;
    if (type == link_hello)
        p[6] = 2; /* the link protocol's version */
    le32(p + 8, seq);
    le32(p + 12, acked);
    le32(p + 20, extra);
    le64(p + 24, size);
    le64(p + 32, addr);
    le32(p + 40, rkey);
}

/* Connects (data and control QP: the stream listener has the agent). The
 * server answers the client's hello: it sends nothing first. */
static void stream_connect(link_t *data, link_t *control) { agent_connect(data, control); }

static void stream_send_hello(link_t *data, uint32_t window, uint64_t inline_size, uint64_t mark) {
    uint8_t h[48];
    link_header(h, link_hello, 0, window, 0, 0, mark, inline_size, 0);
    send_expecting_success(data, h, 48, "a stream hello");
}

/* A valid hello, and the server's answer. */
static void stream_hello_both_ways(link_t *data) {
    stream_send_hello(data, 16, 16384, STREAM_MARK);
    uint8_t *m = NULL;
    int n = receive_message(data, &m, 10000);
    if (n != 48 || get_le64(m + 24) != STREAM_MARK)
        fail("no stream hello from the server (%d bytes)", n);
    note("the server answered with its hello");
}

static void stream_expect_close(link_t *data, link_t *control) {
    link_t *links[] = {data, control};
    expect_disconnect(links, 2, 20000);
}

static int stream_scenario(const char *name) {
    link_t data, control;
    uint8_t f[48];
    if (strcmp(name, "stream-bad-hello") == 0) {
        stream_connect(&data, &control);
        memset(f, 0x33, sizeof f);
        send_expecting_success(&data, f, 48, "48 bytes of 0x33 as the hello");
    } else if (strcmp(name, "stream-wrong-module") == 0) {
        stream_connect(&data, &control);
        stream_send_hello(&data, 16, 16384, C_API_MARK);
    } else if (strcmp(name, "stream-window-zero") == 0) {
        stream_connect(&data, &control);
        stream_send_hello(&data, 0, 16384, STREAM_MARK);
    } else if (strcmp(name, "stream-huge-window") == 0) {
        // The largest window and inline size the hello lets through: the
        // server sizes its send slots by them.
        stream_connect(&data, &control);
        stream_send_hello(&data, 4096, 1 << 20, STREAM_MARK);
    } else if (strcmp(name, "stream-ack-with-hello") == 0) {
        // The bad credit right behind the hello, before the server's hello:
        // it waits in the server's receives while the link is opened, and
        // is handled the moment the link starts. The stream must still be
        // closed (a link started before its stream held it was not).
        stream_connect(&data, &control);
        stream_send_hello(&data, 16, 16384, STREAM_MARK);
        link_header(f, link_credit, 0, 0, 1000, 0, 0, 0, 0);
        send_expecting_success(&data, f, 48, "a credit acknowledging 1000 frames right behind the hello");
    } else if (strcmp(name, "stream-silent") == 0) {
        // Connected, and never a hello: the server's accept must give up.
        stream_connect(&data, &control);
        note("connected; sending no hello");
        link_t *links[] = {&data, &control};
        expect_disconnect(links, 2, 30000);
        return 1;
    } else if (strcmp(name, "stream-bad-frame") == 0 || strcmp(name, "stream-unknown-op") == 0 ||
               strcmp(name, "stream-ack-beyond") == 0 || strcmp(name, "stream-forged-rts") == 0 ||
               strcmp(name, "stream-oversize") == 0) {
        stream_connect(&data, &control);
        stream_hello_both_ways(&data);
        static uint8_t big[20000];
        if (strcmp(name, "stream-bad-frame") == 0) {
            link_header(f, link_data, 10, 1, 0, 0, 0, 0, 0);
            le16(f, 0x0bad);
            send_expecting_success(&data, f, 48, "a frame with magic 0x0bad");
        } else if (strcmp(name, "stream-unknown-op") == 0) {
            link_header(f, link_data, 99, 1, 0, 0, 0, 0, 0);
            send_expecting_success(&data, f, 48, "a data frame of collective 99");
        } else if (strcmp(name, "stream-ack-beyond") == 0) {
            link_header(f, link_credit, 0, 0, 1000, 0, 0, 0, 0);
            send_expecting_success(&data, f, 48, "a credit acknowledging 1000 frames when none were sent");
        } else if (strcmp(name, "stream-forged-rts") == 0) {
            link_header(f, link_rts, 10, 1, 0, 0, 1 << 20, 0x10000, 0x1badcafe);
            send_expecting_success(&data, f, 48, "an rts for 1 MiB at a forged address and rkey");
        } else {
            // Over the server's 16 KiB inline size + header, and over the
            // 256-byte receives a link posts before it grows: the receive
            // fails on the server's device.
            link_header(big, link_data, 10, 1, 0, 0, sizeof big - 48, 0, 0);
            int status = send_message(data.qp, data.send_cq, big, sizeof big);
            note("sent a %zu-byte data frame (the receives hold 256 until grown, 16432 at most): %s", sizeof big,
                 status < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)status));
        }
    } else {
        return 0;
    }
    stream_expect_close(&data, &control);
    return 1;
}

static const char *const scenarios[] = {
    "cm-bad-magic", "cm-short", "cm-bad-kind", "cm-unknown-token", "cm-no-rtu", "cm-data-only",
    "tcp-garbage", "tcp-short", "tcp-stall", "tcp-bad-version", "tcp-bad-qpn", "tcp-bad-mtu", "tcp-bad-flags",
    "tcp-agent-mismatch", "tcp-bad-control", "tcp-bad-ready", "tcp-agent-garbage",
    "agent-truncated", "agent-bad-magic", "agent-bad-version", "agent-unknown-type", "agent-bad-length",
    "agent-oversize", "agent-size-zero", "agent-size-2^40+1", "agent-size-2^63", "agent-size-limit",
    "agent-bad-alignment", "agent-huge-alignment", "agent-request-id-zero", "agent-bad-access",
    "agent-release-never-granted", "agent-return-never-granted", "agent-ack-beyond", "agent-grant-unasked",
    "agent-flood",
    "forged-rkey", "forged-beyond-grant", "forged-after-release",
    "rpc-no-hello", "rpc-bad-hello", "rpc-short-frame", "rpc-bad-magic", "rpc-bad-version", "rpc-unknown-type",
    "rpc-reserved", "rpc-length-mismatch", "rpc-oversize", "rpc-server-frame", "rpc-done-unknown",
    "rpc-credit-overrun", "rpc-rts-too-large", "rpc-forged-rts", "rpc-heartbeat-write",
    "stream-bad-hello", "stream-wrong-module", "stream-window-zero", "stream-huge-window", "stream-silent",
    "stream-bad-frame", "stream-unknown-op", "stream-ack-beyond", "stream-ack-with-hello", "stream-forged-rts", "stream-oversize",
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; ++i)
            puts(scenarios[i]);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: hostile_peer SCENARIO HOST:PORT | hostile_peer list\n");
        return 2;
    }
    scenario = argv[1];
    signal(SIGALRM, on_alarm);
    alarm(40);
    target = resolve(argv[2]);
    int64_t start = now_ms();
    if (!(cm_scenario(scenario) || tcp_scenario(scenario) || agent_scenario(scenario) || forged_scenario(scenario) ||
          rpc_scenario(scenario) || stream_scenario(scenario))) {
        fprintf(stderr, "hostile_peer: unknown scenario '%s' (hostile_peer list shows them)\n", scenario);
        return 2;
    }
    note("ok (%lld ms)", (long long)(now_ms() - start));
    // Leaving: the kernel destroys our ids and QPs, which disconnects
    // whatever the server still holds of ours.
    return 0;
}
