// qp_create_cost: what a queue pair's capacity costs to create, on the
// device itself (raw verbs, no cordma): the storm report's explanation of
// why a connection with cordma's default queues (127 + 127 work requests,
// 4 SGEs, 64 inline bytes; 128 + 128 until 2026-11-28) costs more than one with cmtime's (1 + 1).
//
// Why: a connection storm on one host is CPU-bound, and ibv_create_qp's
// cost grows with the queues it allocates (rxe vmallocs, zeroes and maps
// them). This says how much, capacity by capacity, in the same VM boot as
// the storm, so the two rows of the storm table can be read side by side.
//
// Usage: qp_create_cost [N]   (N queue pairs per capacity, default 200)
// Prints one JSON object per capacity: create, modify to INIT and destroy
// times per queue pair in milliseconds (the mean over N, created one after
// another on one PD and one CQ of the first device's port 1).
#define _POSIX_C_SOURCE 200809L
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

struct capacity {
    unsigned send_wr, recv_wr, send_sge, recv_sge, inline_data;
    const char *what;
};

static const struct capacity capacities[] = {
    {1, 1, 1, 1, 0, "cmtime's"},
    {16, 16, 4, 4, 64, ""},
    {32, 32, 4, 4, 64, ""},
    {64, 64, 4, 4, 64, ""},
    {128, 128, 4, 4, 64, "cordma's default until 2026-11-28"},
    {128, 128, 1, 1, 0, ""},
    {24, 24, 1, 1, 0, "cordma's agent control QP"},
    {127, 127, 4, 4, 64, "cordma's default"},
    {127, 127, 1, 1, 64, ""},
    {127, 127, 2, 2, 32, ""},
    {63, 63, 4, 4, 64, ""},
    {127, 1, 4, 1, 64, ""},
};

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    if (n <= 0 || n > 100000) {
        fprintf(stderr, "qp_create_cost: N must be 1..100000, got '%s'\n", argv[1]);
        return 2;
    }
    struct ibv_device **devices = ibv_get_device_list(NULL);
    if (devices == NULL || devices[0] == NULL) {
        fprintf(stderr, "qp_create_cost: no RDMA device (run inside tools/rxe-vm)\n");
        return 1;
    }
    struct ibv_context *context = ibv_open_device(devices[0]);
    struct ibv_pd *pd = context ? ibv_alloc_pd(context) : NULL;
    struct ibv_cq *cq = pd ? ibv_create_cq(context, 4096, NULL, NULL, 0) : NULL;
    struct ibv_qp **qps = calloc((size_t)n, sizeof *qps);
    if (cq == NULL || qps == NULL) {
        fprintf(stderr, "qp_create_cost: could not open %s with a PD and a CQ\n", ibv_get_device_name(devices[0]));
        return 1;
    }
    // Pass 0 warms up (the first QPs of a process cost more: the provider's
    // and the kernel's first allocations) and prints nothing.
    size_t count = sizeof capacities / sizeof *capacities;
    for (size_t k = 0; k <= count; ++k) {
        const struct capacity *c = &capacities[k == 0 ? 0 : k - 1];
        struct ibv_qp_init_attr attr = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                        .cap = {c->send_wr, c->recv_wr, c->send_sge, c->recv_sge, c->inline_data}};
        double t0 = now_ms();
        for (int i = 0; i < n; ++i)
            if ((qps[i] = ibv_create_qp(pd, &attr)) == NULL) {
                perror("qp_create_cost: ibv_create_qp");
                return 1;
            }
        double t1 = now_ms();
        for (int i = 0; i < n; ++i) {
            struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
            if (ibv_modify_qp(qps[i], &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
                perror("qp_create_cost: ibv_modify_qp(INIT)");
                return 1;
            }
        }
        double t2 = now_ms();
        for (int i = 0; i < n; ++i)
            ibv_destroy_qp(qps[i]);
        double t3 = now_ms();
        if (k == 0)
            continue;
        printf("{\"send_wr\": %u, \"recv_wr\": %u, \"send_sge\": %u, \"recv_sge\": %u, \"inline\": %u, \"what\": \"%s\", "
               "\"qps\": %d, \"create_ms\": %.4f, \"init_ms\": %.4f, \"destroy_ms\": %.4f}\n",
               c->send_wr, c->recv_wr, c->send_sge, c->recv_sge, c->inline_data, c->what, n, (t1 - t0) / n,
               (t2 - t1) / n, (t3 - t2) / n);
    }
    free(qps);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(context);
    ibv_free_device_list(devices);
    return 0;
}
