#include "rdma_lib.h"
#include <stdio.h>
#include <string.h>

#define PORT 5555
#define MSG_SIZE 64
#define NUM_CLIENTS 2

int main(void) {
    const char *server_ip = "192.168.50.59";
    printf("Server starting on IP %s...\n", server_ip);

    // Initialize server context
    rdma_context *ctx = rdma_init(server_ip, PORT, BUFFER_SIZE * 4, true);
    if (!ctx) {
        fprintf(stderr, "Failed to initialize RDMA: %s\n", rdma_get_error());
        return 1;
    }

    // Accept client connections
    for (int i = 0; i < NUM_CLIENTS; i++) {
        printf("Waiting for client %d...\n", i + 1);
        if (rdma_accept_peer(ctx) < 0) {
            fprintf(stderr, "Failed to accept client %d: %s\n", 
                    i + 1, rdma_get_error());
            rdma_cleanup(ctx);
            return 1;
        }
        printf("Client %d connected\n", i + 1);
    }

    // Send start signal to all clients
    const char *start_msg = "START";
    for (int i = 0; i < NUM_CLIENTS; i++) {
        if (rdma_send(ctx, i, start_msg, strlen(start_msg) + 1) < 0) {
            fprintf(stderr, "Failed to send start message\n");
            rdma_cleanup(ctx);
            return 1;
        }
    }

    // Perform all-to-all communication
    char send_msg[MSG_SIZE];
    char recv_buf[BUFFER_SIZE];

    snprintf(send_msg, sizeof(send_msg), "Server Message");
    printf("Sending: '%s'\n", send_msg);

    if (rdma_sequential_alltoall(ctx, send_msg, recv_buf, MSG_SIZE) < 0) {
        fprintf(stderr, "All-to-all failed: %s\n", rdma_get_error());
        rdma_cleanup(ctx);
        return 1;
    }

    printf("Received combined messages: '%s'\n", recv_buf);

    // Cleanup
    rdma_cleanup(ctx);
    return 0;
}
