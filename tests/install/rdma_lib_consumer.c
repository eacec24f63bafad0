/* An rdma_lib program's includes and calls, built against an *installed*
 * cordma the way rdma_lib.h documents: `gcc -std=c11 prog.c $(pkg-config
 * --cflags --libs cordma)`, with #include "rdma_lib.h" found through the
 * compat folder cordma.pc puts on the include path. tests/install_test.sh
 * compiles and links it (it is not run: it would need a device and a peer). */
#include "rdma_lib.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
    rdma_context *ctx = rdma_init(ip, 5555, BUFFER_SIZE * 4, argc > 2);
    if (!ctx) {
        fprintf(stderr, "Failed to initialize RDMA: %s\n", rdma_get_error());
        return 1;
    }
    int peer = argc > 2 ? rdma_accept_peer(ctx) : rdma_connect_peer(ctx, ip, 5555);
    char msg[64] = "hello", all[BUFFER_SIZE];
    if (peer < 0 || rdma_send(ctx, peer, msg, strlen(msg) + 1) < 0 || rdma_recv(ctx, peer, msg, sizeof msg) < 0 ||
        rdma_broadcast(ctx, msg, 6) < 0 || rdma_sequential_alltoall(ctx, msg, all, sizeof msg) < 0 ||
        rdma_disconnect_peer(ctx, peer) < 0) {
        fprintf(stderr, "rdma_lib call failed: %s\n", rdma_get_error());
        rdma_cleanup(ctx);
        return 1;
    }
    printf("%s (MAX_PEERS %d, MAX_WR %d, CQ_DEPTH %d)\n", all, MAX_PEERS, MAX_WR, CQ_DEPTH);
    rdma_cleanup(ctx);
    return 0;
}
