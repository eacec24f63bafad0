/* What tests/support's raw-verbs C programs (atomic_probe.c, hostile_peer.c)
 * share: a monotonic clock, a pause for spacing bounded retries (never a
 * wait for readiness), ADDR:PORT resolution and an RC queue pair's
 * attributes. Header-only: each program is one translation unit. */
#ifndef CORDMA_TESTS_RAW_PEER_H
#define CORDMA_TESTS_RAW_PEER_H

#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <infiniband/verbs.h>

static inline int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline void pause_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Resolves "HOST:PORT" (IPv4) into *out. Returns NULL, or why it failed
 * (in a static buffer) for the caller to report its own way. */
static inline const char *resolve_host_port(const char *host_port, struct sockaddr_in *out) {
    static char why[512];
    char host[256];
    const char *colon = strrchr(host_port, ':');
    if (colon == NULL || (size_t)(colon - host_port) >= sizeof host) {
        snprintf(why, sizeof why, "'%s' is not HOST:PORT", host_port);
        return why;
    }
    memcpy(host, host_port, (size_t)(colon - host_port));
    host[colon - host_port] = 0;
    struct addrinfo hints = {0}, *found = NULL;
    hints.ai_family = AF_INET;
    int rc = getaddrinfo(host, colon + 1, &hints, &found);
    if (rc != 0) {
        snprintf(why, sizeof why, "getaddrinfo(%s): %s", host_port, gai_strerror(rc));
        return why;
    }
    memcpy(out, found->ai_addr, sizeof *out);
    freeaddrinfo(found);
    return NULL;
}

/* An RC queue pair's attributes: one SGE each way. */
static inline struct ibv_qp_init_attr rc_qp_attr(struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                                                 uint32_t max_send_wr, uint32_t max_recv_wr) {
    struct ibv_qp_init_attr attr = {0};
    attr.send_cq = send_cq;
    attr.recv_cq = recv_cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = max_send_wr;
    attr.cap.max_recv_wr = max_recv_wr;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    return attr;
}

#endif
