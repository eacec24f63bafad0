// raw_exchange: is a crossing exchange late on this device? Raw verbs, no
// cordma: one RC connection (librdmacm's helpers), 8-byte SENDs, and per
// round either a ping-pong (the client sends, the server answers) or an
// exchange (both send at once, then wait for the other's), the time per
// round over ROUNDS rounds after 100 untimed.
//
// Why: collectives at small sizes are exchanges. A note of November
// (README, "Collectives") read 2.5 ms a round for crossing messages on rxe
// against 0.08 ms for a ping-pong, and issue 33 asks whether that is rxe's
// behaviour or cordma's. This measures rxe's, in the same boot as the
// collectives, with the two ways of waiting cordma has: spinning on the CQ
// (busy) and sleeping on its completion channel (event).
//
// Usage: raw_exchange server|client ADDR PORT pingpong|exchange ROUNDS busy|event
// The server prints "listening on ADDR:PORT" once it listens; both print
// one line: "<side> <mode> <wait>: <us> us per round". Exit status 1 with a
// message on any failure (a work completion's status included).
#define _POSIX_C_SOURCE 200809L
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { depth = 16, size = 8, warmup = 100 };

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

/// One completion from `cq` (spinning) or through the id's channel.
static void complete(struct rdma_cm_id *id, int recv, int event, const char *what) {
    struct ibv_wc wc;
    int n;
    if (event)
        n = recv ? rdma_get_recv_comp(id, &wc) : rdma_get_send_comp(id, &wc);
    else
        while ((n = ibv_poll_cq(recv ? id->recv_cq : id->send_cq, 1, &wc)) == 0) {
        }
    if (n < 0)
        fail(what);
    if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "raw_exchange: %s: work completion %s\n", what, ibv_wc_status_str(wc.status));
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0) ||
        (strcmp(argv[4], "pingpong") != 0 && strcmp(argv[4], "exchange") != 0) ||
        (strcmp(argv[6], "busy") != 0 && strcmp(argv[6], "event") != 0) || atoi(argv[5]) <= 0) {
        fprintf(stderr, "usage: raw_exchange server|client ADDR PORT pingpong|exchange ROUNDS busy|event\n");
        return 2;
    }
    int server = strcmp(argv[1], "server") == 0, exchange = strcmp(argv[4], "exchange") == 0;
    int rounds = atoi(argv[5]), event = strcmp(argv[6], "event") == 0;

    struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_flags = server ? RAI_PASSIVE : 0}, *where;
    if (rdma_getaddrinfo(argv[2], argv[3], &hints, &where) != 0)
        fail("rdma_getaddrinfo");
    struct ibv_qp_init_attr attr = {.cap = {depth, depth, 1, 1, size}, .sq_sig_all = 1};
    struct rdma_cm_id *id, *listening;
    if (server) {
        if (rdma_create_ep(&listening, where, NULL, &attr) != 0 || rdma_listen(listening, 1) != 0)
            fail("rdma_create_ep/rdma_listen");
        printf("listening on %s:%s\n", argv[2], argv[3]);
        fflush(stdout);
        if (rdma_get_request(listening, &id) != 0)
            fail("rdma_get_request");
    } else if (rdma_create_ep(&id, where, NULL, &attr) != 0) {
        fail("rdma_create_ep");
    }
    char out[size] = {0}, *in = calloc(depth, size);
    struct ibv_mr *in_mr = in ? rdma_reg_msgs(id, in, depth * size) : NULL;
    if (in_mr == NULL)
        fail("rdma_reg_msgs");
    for (int i = 0; i < depth; ++i)
        if (rdma_post_recv(id, NULL, in + i * size, size, in_mr) != 0)
            fail("rdma_post_recv");
    if ((server ? rdma_accept(id, NULL) : rdma_connect(id, NULL)) != 0)
        fail(server ? "rdma_accept" : "rdma_connect");

    double start = 0;
    for (int r = 0; r < warmup + rounds; ++r) {
        if (r == warmup)
            start = now_us();
        int send_first = exchange || !server;  // a ping-pong's server answers
        if (send_first && rdma_post_send(id, NULL, out, size, NULL, IBV_SEND_INLINE) != 0)
            fail("rdma_post_send");
        complete(id, 1, event, "receive");
        if (rdma_post_recv(id, NULL, in + (r % depth) * size, size, in_mr) != 0)
            fail("rdma_post_recv");
        if (!send_first && rdma_post_send(id, NULL, out, size, NULL, IBV_SEND_INLINE) != 0)
            fail("rdma_post_send");
        complete(id, 0, event, "send");
    }
    printf("%s %s %s: %.1f us per round\n", argv[1], argv[4], argv[6], (now_us() - start) / rounds);
    rdma_disconnect(id);
    return 0;
}
