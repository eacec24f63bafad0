// atomic_probe: does the RDMA device return each fetch_add's own old value?
// Plain C11, libibverbs and librdmacm only (no cordma), so a wrong value it
// sees is the device's (rdma_rxe's), not cordma's.
//
//   atomic_probe server ADDR:PORT [--timeout S] [--linger S]
//   atomic_probe client ADDR:PORT [--seconds S] [--window W] [--reuse K]
//                [--depth D] [--no-sentinel] [--timeout S]
//                [--reads N] [--writes N] [--size BYTES]
//
// The server registers one zeroed 8-byte word (REMOTE_ATOMIC | REMOTE_READ |
// REMOTE_WRITE | LOCAL_WRITE), hands its address and rkey to the client in
// the accept's private data, waits for the disconnect, and prints the word.
// --timeout: how long it waits for the client to connect (default 600 s);
// --linger: how long, once connected, for its disconnect (default 600 s).
//
// The client keeps W fetch_adds (add 1) outstanding on one RC QP for S
// seconds. Op i's result goes to slot i % K of a registered array: K at
// least the number of ops gives every op its own buffer; K = W reuses them
// the way cordma reuses its per-send-slot result words. Unless
// --no-sentinel, a slot is filled with a sentinel (0xEEEE... | i) before op
// i is posted, so a completion whose result was never written shows up as
// such instead of as the slot's previous value. At the end it reads the
// word back (an RDMA READ and a fetch_add of 0) and checks:
//   - every old value in [0, final) was returned exactly once,
//   - final equals the number of fetch_adds that completed (no add ran
//     twice, none lost),
//   - completions came in posting order, each once,
//   - (unique buffers) no result buffer changed after its completion.
// Prints the counts and examples; exit 0 if all hold, 1 on a violation, 2
// on bad usage, 3 on a failure to run (no connection, an error completion,
// a deadline passed). Every wait is bounded.
//
// --reads N, --writes N: also keep N RDMA READs and N RDMA WRITEs of
// BYTES (default 4096) in flight on the same QP, interleaved with the
// fetch_adds (cordma's fault test mixed them too).
//
// --depth D: initiator depth / responder resources (max_rd_atomic); default
// 16, cordma's default, capped by the device.

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "raw_peer.h"

static const char *role = "atomic_probe";

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "%s: ", role);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static struct sockaddr_in resolve(const char *host_port) {
    struct sockaddr_in out;
    const char *why = resolve_host_port(host_port, &out);
    if (why != NULL)
        die(2, "%s", why);
    return out;
}

/* What the server's accept carries. */
struct grant {
    uint64_t addr;
    uint32_t rkey;
    uint32_t magic;
};
enum { grant_magic = 0x41544f4d };  // "ATOM"
/* The server's region: the word at offset 0, the --mix reads' and writes'
 * area from offset 4096. */
enum { region_bytes = 1 << 20, area_offset = 4096 };

/* The next event on `ch` within `timeout_ms`, or NULL. The caller acks it. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int timeout_ms) {
    struct pollfd p = {ch->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return NULL;
    struct rdma_cm_event *e = NULL;
    if (rdma_get_cm_event(ch, &e) != 0)
        die(3, "rdma_get_cm_event: %s", strerror(errno));
    return e;
}

static void print_counters(void) {
    // rxe's own counters, when visible: retries, duplicate requests, ...
    const char *names[] = {"duplicate_request", "out_of_seq_request", "rcvd_seq_err", "completer_retry_err",
                           "retry_exceeded_err", "send_rnr_err", "rcvd_rnr_err", "ack_deferred",
                           "retry_rnr_exceeded_err", "rdma_sends", "rdma_recvs", "sent_pkts", "rcvd_pkts"};
    char line[512] = "";
    size_t at = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        char path[256];
        snprintf(path, sizeof path, "/sys/class/infiniband/rxe0/ports/1/hw_counters/%s", names[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        unsigned long long v = 0;
        if (fscanf(f, "%llu", &v) == 1 && at < sizeof line)
            at += (size_t)snprintf(line + at, sizeof line - at, " %s=%llu", names[i], v);
        fclose(f);
    }
    if (at > 0)
        printf("%s: rxe0 counters:%s\n", role, line);
}

/* ---- server --------------------------------------------------------- */

static int server(const char *address, int timeout_s, int linger_s) {
    role = "atomic_probe server";
    struct sockaddr_in where = resolve(address);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *listener = NULL;
    if (ch == NULL || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) != 0)
        die(3, "rdma_create_id: %s", strerror(errno));
    if (rdma_bind_addr(listener, (struct sockaddr *)&where) != 0)
        die(3, "rdma_bind_addr(%s): %s", address, strerror(errno));
    if (rdma_listen(listener, 1) != 0)
        die(3, "rdma_listen: %s", strerror(errno));
    printf("%s: listening on %s\n", role, address);
    fflush(stdout);

    int64_t until = now_ms() + (int64_t)timeout_s * 1000;
    struct rdma_cm_event *e = NULL;
    for (;;) {
        int left = (int)(until - now_ms());
        if (left <= 0 || (e = next_event(ch, left)) == NULL)
            die(3, "no connect request within %d s", timeout_s);
        if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST)
            break;
        printf("%s: ignoring %s\n", role, rdma_event_str(e->event));
        rdma_ack_cm_event(e);
    }
    struct rdma_cm_id *id = e->id;
    struct rdma_conn_param asked = e->param.conn;
    rdma_ack_cm_event(e);

    struct ibv_device_attr dev;
    if (ibv_query_device(id->verbs, &dev) != 0)
        die(3, "ibv_query_device: %s", strerror(errno));
    struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
    struct ibv_cq *cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
    if (pd == NULL || cq == NULL)
        die(3, "ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
    struct ibv_qp_init_attr qa = rc_qp_attr(cq, cq, 4, 4);
    if (rdma_create_qp(id, pd, &qa) != 0)
        die(3, "rdma_create_qp: %s", strerror(errno));
    uint64_t *word = aligned_alloc(4096, region_bytes);
    if (word == NULL)
        die(3, "aligned_alloc");
    memset(word, 0, region_bytes);
    struct ibv_mr *mr = ibv_reg_mr(pd, word, region_bytes,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_REMOTE_ATOMIC);
    if (mr == NULL)
        die(3, "ibv_reg_mr: %s", strerror(errno));

    struct grant g = {(uint64_t)(uintptr_t)word, mr->rkey, grant_magic};
    struct rdma_conn_param param = {0};
    param.private_data = &g;
    param.private_data_len = sizeof g;
    param.responder_resources =
        (uint8_t)(asked.initiator_depth < dev.max_qp_rd_atom ? asked.initiator_depth : dev.max_qp_rd_atom);
    param.initiator_depth =
        (uint8_t)(asked.responder_resources < dev.max_qp_init_rd_atom ? asked.responder_resources
                                                                       : dev.max_qp_init_rd_atom);
    param.retry_count = 6;
    param.rnr_retry_count = 7;
    if (rdma_accept(id, &param) != 0)
        die(3, "rdma_accept: %s", strerror(errno));
    printf("%s: accepted (responder_resources %u, initiator_depth %u)\n", role, param.responder_resources,
           param.initiator_depth);
    fflush(stdout);

    bool established = false;
    for (;;) {
        int left = (int)(until - now_ms());
        if (left <= 0 || (e = next_event(ch, left)) == NULL)
            die(3, "%s within %d s (word now %" PRIu64 ")", established ? "no disconnect" : "no ESTABLISHED",
                established ? linger_s : timeout_s, *(volatile uint64_t *)word);
        enum rdma_cm_event_type t = e->event;
        int status = e->status;
        rdma_ack_cm_event(e);
        if (t == RDMA_CM_EVENT_ESTABLISHED) {
            // From now on, wait for the disconnect at most linger_s.
            established = true;
            until = now_ms() + (int64_t)linger_s * 1000;
            continue;
        }
        if (t == RDMA_CM_EVENT_DISCONNECTED)
            break;
        die(3, "unexpected %s (status %d)", rdma_event_str(t), status);
    }
    printf("%s: disconnected; final word %" PRIu64 "\n", role, *(volatile uint64_t *)word);
    print_counters();
    fflush(stdout);
    rdma_disconnect(id);
    rdma_destroy_qp(id);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(id);
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(ch);
    return 0;
}

/* ---- client --------------------------------------------------------- */

static struct rdma_event_channel *cch;
static struct rdma_cm_id *cid;
static struct ibv_pd *cpd;
static struct ibv_comp_channel *ccomp;
static struct ibv_cq *ccq;
static struct grant granted;

/* One connection attempt; false (everything undone) if refused. */
static bool try_connect(struct sockaddr_in *to, uint8_t depth, uint8_t *depth_used) {
    if (rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) != 0)
        die(3, "rdma_create_id: %s", strerror(errno));
    struct rdma_cm_event *e;
    bool ok = false;
    if (rdma_resolve_addr(cid, NULL, (struct sockaddr *)to, 2000) != 0)
        goto undo;
    if ((e = next_event(cch, 5000)) == NULL)
        goto undo;
    ok = e->event == RDMA_CM_EVENT_ADDR_RESOLVED;
    rdma_ack_cm_event(e);
    if (!ok || rdma_resolve_route(cid, 2000) != 0)
        goto undo_false;
    if ((e = next_event(cch, 5000)) == NULL)
        goto undo;
    ok = e->event == RDMA_CM_EVENT_ROUTE_RESOLVED;
    rdma_ack_cm_event(e);
    if (!ok)
        goto undo_false;
    if (cpd == NULL) {
        cpd = ibv_alloc_pd(cid->verbs);
        ccomp = ibv_create_comp_channel(cid->verbs);
        ccq = ccomp ? ibv_create_cq(cid->verbs, 1024, NULL, ccomp, 0) : NULL;
        if (cpd == NULL || ccq == NULL)
            die(3, "ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
    }
    struct ibv_device_attr dev;
    if (ibv_query_device(cid->verbs, &dev) != 0)
        die(3, "ibv_query_device: %s", strerror(errno));
    uint8_t d = depth;
    if (d > dev.max_qp_init_rd_atom)
        d = (uint8_t)dev.max_qp_init_rd_atom;
    if (d > dev.max_qp_rd_atom)
        d = (uint8_t)dev.max_qp_rd_atom;
    *depth_used = d;
    struct ibv_qp_init_attr qa = rc_qp_attr(ccq, ccq, 512, 4);
    if (rdma_create_qp(cid, cpd, &qa) != 0)
        die(3, "rdma_create_qp: %s", strerror(errno));
    uint8_t ack_timeout = 14;  // cordma's default: 4.096 us * 2^14 = 67 ms
    rdma_set_option(cid, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout, sizeof ack_timeout);
    struct rdma_conn_param param = {0};
    param.initiator_depth = d;
    param.responder_resources = d;
    param.retry_count = 6;  // cordma's default
    param.rnr_retry_count = 7;
    if (rdma_connect(cid, &param) != 0)
        goto undo_qp;
    if ((e = next_event(cch, 15000)) == NULL)
        goto undo_qp;
    ok = e->event == RDMA_CM_EVENT_ESTABLISHED && e->param.conn.private_data_len >= sizeof granted;
    if (ok)
        memcpy(&granted, e->param.conn.private_data, sizeof granted);
    rdma_ack_cm_event(e);
    if (ok && granted.magic != grant_magic)
        die(3, "the accept's private data is not an atomic_probe grant");
    if (ok)
        return true;
undo_qp:
    rdma_destroy_qp(cid);
undo_false:
undo:
    rdma_destroy_id(cid);
    cid = NULL;
    return false;
}

/* Up to `max` completions, waiting at most `timeout_ms` for the first. */
static int wait_completions(struct ibv_wc *wc, int max, int timeout_ms) {
    int n = ibv_poll_cq(ccq, max, wc);
    if (n != 0)
        return n;
    if (ibv_req_notify_cq(ccq, 0) != 0)
        die(3, "ibv_req_notify_cq: %s", strerror(errno));
    n = ibv_poll_cq(ccq, max, wc);  // one may have come before the arm
    if (n != 0)
        return n;
    struct pollfd p = {ccomp->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return 0;
    struct ibv_cq *which;
    void *context;
    if (ibv_get_cq_event(ccomp, &which, &context) != 0)
        die(3, "ibv_get_cq_event: %s", strerror(errno));
    ibv_ack_cq_events(which, 1);
    return ibv_poll_cq(ccq, max, wc);
}

static const uint64_t sentinel_tag = 0xEEEE000000000000ull;

static int client(const char *address, int seconds, int window, uint64_t reuse, int depth, bool sentinel,
                  int timeout_s, int reads, int writes, uint32_t size) {
    role = "atomic_probe client";
    struct sockaddr_in to = resolve(address);
    cch = rdma_create_event_channel();
    if (cch == NULL)
        die(3, "rdma_create_event_channel: %s", strerror(errno));
    int64_t connect_until = now_ms() + 60000;
    uint8_t depth_used = 0;
    int attempts = 0;
    while (!try_connect(&to, (uint8_t)depth, &depth_used)) {
        ++attempts;
        if (now_ms() > connect_until)
            die(3, "no connection to %s within 60 s (%d attempts)", address, attempts);
        pause_ms(100);  // poll again: the server may not be listening yet
    }
    printf("%s: connected to %s after %d refused attempts; word at 0x%" PRIx64 " rkey 0x%x; window %d, reuse %" PRIu64
           ", depth %u, %d s, sentinel %s\n",
           role, address, attempts, granted.addr, granted.rkey, window, reuse, depth_used, seconds,
           sentinel ? "on" : "off");
    fflush(stdout);

    const uint64_t max_ops = 1u << 24;
    if (reuse > max_ops)
        reuse = max_ops;
    uint64_t *results = aligned_alloc(4096, (reuse * 8 + 4095) / 4096 * 4096);
    uint64_t *old = malloc(max_ops * sizeof *old);
    uint64_t *scratch = aligned_alloc(4096, region_bytes);
    uint8_t *unwritten = calloc(max_ops, 1);
    if (results == NULL || old == NULL || scratch == NULL || unwritten == NULL)
        die(3, "out of memory");
    memset(results, 0, reuse * 8);
    memset(scratch, 0x5a, region_bytes);
    struct ibv_mr *rmr = ibv_reg_mr(cpd, results, reuse * 8, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *smr = ibv_reg_mr(cpd, scratch, region_bytes, IBV_ACCESS_LOCAL_WRITE);
    if (rmr == NULL || smr == NULL)
        die(3, "ibv_reg_mr: %s", strerror(errno));

    // Every work request gets a sequence number (its wr_id); RC completes
    // them in posting order. kinds[] says what each one was: an atomic
    // (its op index in atom_of[]), or a --mix read or write.
    enum { ring = 1024 };
    uint8_t kinds[ring];
    uint64_t atom_of[ring];
    enum { k_atomic = 1, k_read = 2, k_write = 3 };
    uint64_t seq = 0, seq_done = 0;
    uint64_t posted = 0, completed = 0, out_of_order = 0, unwritten_count = 0;
    uint64_t reads_out = 0, writes_out = 0, reads_done = 0, writes_done = 0;
    uint32_t area_slots = (uint32_t)((region_bytes - area_offset) / size);
    int64_t start = now_ms(), stop_at = start + (int64_t)seconds * 1000;
    int64_t last_progress = start;
    const int stall_ms = timeout_s * 1000;
    struct ibv_wc wc[64];
    for (;;) {
        bool sending = now_ms() < stop_at && posted < max_ops;
        bool more = sending;
        while (more) {
            more = false;
            // One of each kind in turn, so they interleave on the wire.
            if (posted - completed < (uint64_t)window && posted < max_ops) {
                uint64_t slot = posted % reuse;
                if (sentinel)
                    results[slot] = sentinel_tag | posted;
                struct ibv_sge sge = {(uintptr_t)&results[slot], 8, rmr->lkey};
                struct ibv_send_wr wr = {0}, *bad = NULL;
                wr.wr_id = seq;
                wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.send_flags = IBV_SEND_SIGNALED;
                wr.sg_list = &sge;
                wr.num_sge = 1;
                wr.wr.atomic.remote_addr = granted.addr;
                wr.wr.atomic.rkey = granted.rkey;
                wr.wr.atomic.compare_add = 1;
                if (ibv_post_send(cid->qp, &wr, &bad) != 0)
                    die(3, "ibv_post_send(op %" PRIu64 "): %s", posted, strerror(errno));
                kinds[seq % ring] = k_atomic;
                atom_of[seq % ring] = posted;
                ++seq;
                ++posted;
                more = true;
            }
            for (int k = 0; k < 2; ++k) {
                bool is_read = k == 0;
                if (is_read ? reads_out >= (uint64_t)reads : writes_out >= (uint64_t)writes)
                    continue;
                uint32_t at = (uint32_t)(seq % area_slots) * size;
                struct ibv_sge sge = {(uintptr_t)((uint8_t *)scratch + area_offset + at), size, smr->lkey};
                struct ibv_send_wr wr = {0}, *bad = NULL;
                wr.wr_id = seq;
                wr.opcode = is_read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
                wr.send_flags = IBV_SEND_SIGNALED;
                wr.sg_list = &sge;
                wr.num_sge = 1;
                wr.wr.rdma.remote_addr = granted.addr + area_offset + at;
                wr.wr.rdma.rkey = granted.rkey;
                if (ibv_post_send(cid->qp, &wr, &bad) != 0)
                    die(3, "ibv_post_send(%s): %s", is_read ? "read" : "write", strerror(errno));
                kinds[seq % ring] = is_read ? k_read : k_write;
                ++seq;
                ++*(is_read ? &reads_out : &writes_out);
                more = true;
            }
            more = more && now_ms() < stop_at;
        }
        if (!sending && seq_done == seq)
            break;
        int n = wait_completions(wc, 64, 1000);
        if (n < 0)
            die(3, "ibv_poll_cq: %d", n);
        if (n == 0) {
            if (now_ms() - last_progress > stall_ms)
                die(3, "no completion for %d s (%" PRIu64 " posted, %" PRIu64 " completed)", timeout_s, seq,
                    seq_done);
            continue;
        }
        last_progress = now_ms();
        for (int i = 0; i < n; ++i) {
            uint64_t s = wc[i].wr_id;
            if (wc[i].status != IBV_WC_SUCCESS)
                die(3, "request %" PRIu64 " (kind %d, %" PRIu64 " completed before it) failed: %s (status %d, "
                       "vendor_err 0x%x)",
                    s, s < seq ? kinds[s % ring] : 0, seq_done, ibv_wc_status_str(wc[i].status), wc[i].status,
                    wc[i].vendor_err);
            if (s >= seq)
                die(3, "completion of request %" PRIu64 ", never posted", s);
            if (s != seq_done) {
                if (out_of_order < 10)
                    printf("%s: completion of request %" PRIu64 " when %" PRIu64 " was next\n", role, s, seq_done);
                ++out_of_order;
            }
            ++seq_done;
            if (kinds[s % ring] == k_read) {
                --reads_out;
                ++reads_done;
                continue;
            }
            if (kinds[s % ring] == k_write) {
                --writes_out;
                ++writes_done;
                continue;
            }
            uint64_t op = atom_of[s % ring];
            uint64_t v = results[op % reuse];
            old[op] = v;
            if (sentinel && v == (sentinel_tag | op)) {
                unwritten[op] = 1;
                if (unwritten_count < 10)
                    printf("%s: op %" PRIu64 " completed but its result buffer was never written\n", role, op);
                ++unwritten_count;
            }
            ++completed;
        }
    }
    int64_t took = now_ms() - start;

    // The word now: an RDMA READ, then a fetch_add of 0.
    uint64_t final_read = 0, final_add = 0;
    for (int k = 0; k < 2; ++k) {
        struct ibv_sge sge = {(uintptr_t)&scratch[k], 8, smr->lkey};
        struct ibv_send_wr wr = {0}, *bad = NULL;
        wr.wr_id = UINT64_MAX - (uint64_t)k;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (k == 0) {
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma.remote_addr = granted.addr;
            wr.wr.rdma.rkey = granted.rkey;
        } else {
            wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic.remote_addr = granted.addr;
            wr.wr.atomic.rkey = granted.rkey;
            wr.wr.atomic.compare_add = 0;
        }
        if (ibv_post_send(cid->qp, &wr, &bad) != 0)
            die(3, "ibv_post_send(final %s): %s", k ? "fetch_add" : "read", strerror(errno));
        int64_t until = now_ms() + stall_ms;
        int n;
        while ((n = wait_completions(wc, 1, 1000)) == 0)
            if (now_ms() > until)
                die(3, "the final %s did not complete within %d s", k ? "fetch_add" : "read", timeout_s);
        if (n < 0 || wc[0].status != IBV_WC_SUCCESS)
            die(3, "the final %s failed: %s", k ? "fetch_add" : "read",
                n < 0 ? "ibv_poll_cq" : ibv_wc_status_str(wc[0].status));
    }
    final_read = scratch[0];
    final_add = scratch[1];

    // Late writes: a unique buffer that changed after its completion.
    uint64_t late = 0;
    if (reuse >= posted)
        for (uint64_t i = 0; i < posted; ++i)
            if (results[i] != old[i]) {
                if (late < 10)
                    printf("%s: op %" PRIu64 "'s buffer changed after its completion: %" PRIu64 " then %" PRIu64
                           "\n",
                           role, i, old[i], results[i]);
                ++late;
            }

    uint64_t final = final_add;
    uint32_t *count = calloc(final + 1, sizeof *count);
    if (count == NULL)
        die(3, "out of memory (final %" PRIu64 ")", final);
    uint64_t out_of_range = 0;
    for (uint64_t i = 0; i < completed; ++i) {
        if (old[i] >= final) {
            if (out_of_range < 10 && !unwritten[i])
                printf("%s: op %" PRIu64 " returned %" PRIu64 ", not below the final %" PRIu64 "\n", role, i,
                       old[i], final);
            ++out_of_range;
        } else {
            ++count[old[i]];
        }
    }
    uint64_t duplicates = 0, missing = 0, shown = 0;
    for (uint64_t v = 0; v < final; ++v) {
        if (count[v] == 0)
            ++missing;
        if (count[v] > 1) {
            duplicates += count[v] - 1;
            if (shown++ < 10) {
                printf("%s: old value %" PRIu64 " returned %u times, to ops", role, v, count[v]);
                for (uint64_t i = 0; i < completed; ++i)
                    if (old[i] == v)
                        printf(" %" PRIu64 " (slot %" PRIu64 ")", i, i % reuse);
                printf("; neighbours:");
                uint64_t first = 0;
                for (uint64_t i = 0; i < completed; ++i)
                    if (old[i] == v) {
                        first = i;
                        break;
                    }
                uint64_t lo = first >= (uint64_t)window + 2 ? first - (uint64_t)window - 2 : 0;
                for (uint64_t i = lo; i < completed && i <= first + (uint64_t)window + 2; ++i)
                    printf(" op%" PRIu64 "=%" PRIu64, i, old[i]);
                printf("\n");
            }
        }
    }
    shown = 0;
    for (uint64_t v = 0; v < final && shown < 10; ++v)
        if (count[v] == 0) {
            printf("%s: old value %" PRIu64 " returned to no op\n", role, v);
            ++shown;
        }
    bool bad = duplicates || missing || out_of_range || out_of_order || unwritten_count || late ||
               final != completed || final_read != final_add;
    printf("%s: RESULT window %d reuse %" PRIu64 " depth %u mix %d/%d x %u: %" PRIu64 " ops (%" PRIu64
           " reads, %" PRIu64 " writes) in %.1f s, final %" PRIu64
           " (read %" PRIu64 "), duplicates %" PRIu64 ", missing %" PRIu64 ", out_of_range %" PRIu64
           ", unwritten %" PRIu64 ", late_writes %" PRIu64 ", out_of_order %" PRIu64 ", extra_adds %" PRId64 ": %s\n",
           role, window, reuse, depth_used, reads, writes, size, completed, reads_done, writes_done, took / 1000.0,
           final, final_read, duplicates, missing,
           out_of_range, unwritten_count, late, out_of_order, (int64_t)(final - completed), bad ? "FAIL" : "ok");
    print_counters();
    fflush(stdout);

    rdma_disconnect(cid);
    struct rdma_cm_event *e = next_event(cch, 5000);
    if (e != NULL)
        rdma_ack_cm_event(e);
    rdma_destroy_qp(cid);
    ibv_dereg_mr(rmr);
    ibv_dereg_mr(smr);
    ibv_destroy_cq(ccq);
    ibv_destroy_comp_channel(ccomp);
    ibv_dealloc_pd(cpd);
    rdma_destroy_id(cid);
    rdma_destroy_event_channel(cch);
    return bad ? 1 : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: atomic_probe server ADDR:PORT [--timeout S] [--linger S]\n"
            "       atomic_probe client ADDR:PORT [--seconds S] [--window W] [--reuse K] [--depth D]"
            " [--no-sentinel] [--timeout S] [--reads N] [--writes N] [--size BYTES]\n");
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        usage();
    int seconds = 30, window = 4, depth = 16, timeout_s = 600, reads = 0, writes = 0, linger_s = 600;
    uint32_t size = 4096;
    uint64_t reuse = 1u << 22;
    bool sentinel = true;
    for (int i = 3; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--no-sentinel") == 0) {
            sentinel = false;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        long long v = strtoll(argv[++i], NULL, 0);
        if (strcmp(a, "--seconds") == 0 && v > 0)
            seconds = (int)v;
        else if (strcmp(a, "--window") == 0 && v > 0 && v <= 256)
            window = (int)v;
        else if (strcmp(a, "--reuse") == 0 && v > 0)
            reuse = (uint64_t)v;
        else if (strcmp(a, "--depth") == 0 && v > 0 && v <= 255)
            depth = (int)v;
        else if (strcmp(a, "--timeout") == 0 && v > 0)
            timeout_s = (int)v;
        else if (strcmp(a, "--linger") == 0 && v > 0)
            linger_s = (int)v;
        else if (strcmp(a, "--reads") == 0 && v >= 0 && v <= 128)
            reads = (int)v;
        else if (strcmp(a, "--writes") == 0 && v >= 0 && v <= 128)
            writes = (int)v;
        else if (strcmp(a, "--size") == 0 && v > 0 && v <= 65536)
            size = (uint32_t)v;
        else
            usage();
    }
    if (strcmp(argv[1], "server") == 0)
        return server(argv[2], timeout_s, linger_s);
    if (strcmp(argv[1], "client") == 0) {
        if (reuse < (uint64_t)window)
            die(2, "--reuse %" PRIu64 " is less than --window %d: a buffer would be shared by ops in flight", reuse,
                window);
        return client(argv[2], seconds, window, reuse, depth, sentinel, timeout_s, reads, writes, size);
    }
    usage();
}
