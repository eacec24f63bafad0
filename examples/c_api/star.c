/*
 * star: a server and N clients exchange data with cordma's C API (cordma.h).
 *
 *   star server ADDR:PORT N    listen on ADDR:PORT (port 0: any free one),
 *                              accept N clients, then run the rounds below
 *   star client ADDR:PORT ID   connect to the server there as client ID (1, 2, ...)
 *
 * The rounds, the same on every side:
 *   0. each client tells the server its ID (a plain message);
 *   1. cordma_alltoall, one peer at a time (CORDMA_ORDER_SEQUENTIAL);
 *   2. cordma_alltoall, every peer at once (CORDMA_ORDER_PAIRWISE);
 *   3. cordma_allgather;
 *   4. 1 MiB each way with cordma_send/cordma_recv (larger than the receive
 *      buffers: it goes zero-copy, the receiver RDMA-READs it);
 *   5. cordma_barrier, so nobody leaves before everyone is done.
 * Every slot names its sender and receiver ("from 2 to 0, round 1", then a
 * pattern of both); each side checks every byte it gets and exits non-zero,
 * with cordma_last_error(), on any failure or mismatch.
 *
 * In a star a client's only peer is the server (its peer 0): its all-to-all
 * has one slot each way, and its all-gather gets the server's message only.
 * The server's peers are the clients in the order it accepted them.
 *
 * Build: gcc -std=c11 star.c $(pkg-config --cflags --libs cordma)
 * examples/c_api/run.sh runs a server and three clients on one host.
 */
#include <cordma/cordma.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SLOT = 512,        /* bytes per all-to-all / all-gather slot */
    LARGE = 1 << 20,   /* the large message of round 4 */
    EVERYONE = -1,     /* the receiver of an all-gather message */
    MAX_CLIENTS = 64
};

static const char *role = "star";

/* Reports a failed call with cordma's message for it, and fails. */
static int failed(const char *what) {
    fprintf(stderr, "%s: %s failed: %s\n", role, what, cordma_last_error());
    return 0;
}

/* What `from` sends `to` in `round` (0 is the server, clients are their
   IDs): a line naming both, then bytes that depend on both. */
static void fill(unsigned char *buf, size_t len, int from, int to, int round) {
    int n = snprintf((char *)buf, len, "from %d to %d, round %d", from, to, round);
    for (size_t i = (size_t)n + 1; i < len; ++i)
        buf[i] = (unsigned char)(i * 7 + (size_t)from * 31 + (size_t)(to + 1) * 17 + (size_t)round);
}

/* Whether `got` is exactly what `from` should have sent `to`. */
static int check(const unsigned char *got, size_t len, int from, int to, int round) {
    unsigned char *want = malloc(len);
    if (!want)
        return 0;
    fill(want, len, from, to, round);
    int ok = memcmp(got, want, len) == 0;
    if (!ok)
        fprintf(stderr, "%s: round %d: expected \"%s\", got \"%.40s\" (or a later byte differs)\n", role, round,
                (char *)want, (const char *)got);
    free(want);
    return ok;
}

/* Round 4's messages: 1 MiB from `from` to `to`, peer `peer` of ctx. */
static int send_large(cordma_context *ctx, int peer, unsigned char *buf, int from, int to) {
    fill(buf, LARGE, from, to, 4);
    return cordma_send(ctx, peer, buf, LARGE) == 0 || failed("cordma_send of 1 MiB");
}

static int receive_large(cordma_context *ctx, int peer, unsigned char *buf, int from, int to) {
    memset(buf, 0, LARGE);
    ssize_t got = cordma_recv(ctx, peer, buf, LARGE);
    if (got < 0)
        return failed("cordma_recv of 1 MiB");
    if (got != LARGE) {
        fprintf(stderr, "%s: got %zd bytes, expected %d\n", role, got, LARGE);
        return 0;
    }
    return check(buf, LARGE, from, to, 4);
}

/* Rounds 1 to 5 for any side. `ids[i]` is the ID of peer i (the server: 0). */
static int run_rounds(cordma_context *ctx, int me, const int *ids) {
    int peers = cordma_peer_count(ctx);
    size_t all = (size_t)peers * SLOT;
    unsigned char *out = malloc(all), *in = malloc(all), *large = malloc(LARGE);
    int ok = out && in && large;

    /* 1 and 2: all-to-all; slot i of each buffer is peer i's. */
    cordma_order orders[2] = {CORDMA_ORDER_SEQUENTIAL, CORDMA_ORDER_PAIRWISE};
    for (int round = 1; ok && round <= 2; ++round) {
        for (int i = 0; i < peers; ++i)
            fill(out + (size_t)i * SLOT, SLOT, me, ids[i], round);
        if (cordma_alltoall(ctx, out, in, SLOT, orders[round - 1]) != 0)
            ok = failed("cordma_alltoall");
        for (int i = 0; ok && i < peers; ++i)
            ok = check(in + (size_t)i * SLOT, SLOT, ids[i], me, round);
    }

    /* 3: all-gather; one message from each, slot i holds peer i's. */
    if (ok) {
        fill(out, SLOT, me, EVERYONE, 3);
        if (cordma_allgather(ctx, out, in, SLOT) != 0)
            ok = failed("cordma_allgather");
        for (int i = 0; ok && i < peers; ++i)
            ok = check(in + (size_t)i * SLOT, SLOT, ids[i], EVERYONE, 3);
    }

    /* 4: 1 MiB each way. A client sends first, then receives; the server
       receives from each client in turn, then answers it. */
    for (int i = 0; ok && i < peers; ++i) {
        if (me == 0)
            ok = receive_large(ctx, i, large, ids[i], me) && send_large(ctx, i, large, me, ids[i]);
        else
            ok = send_large(ctx, i, large, me, ids[i]) && receive_large(ctx, i, large, ids[i], me);
    }

    /* 5: nobody leaves before everybody is done. */
    if (ok && cordma_barrier(ctx) != 0)
        ok = failed("cordma_barrier");
    free(out);
    free(in);
    free(large);
    return ok;
}

/* "ADDR:PORT" (the port after the last colon) into host and port. */
static int parse_address(const char *text, char *host, size_t host_len, int *port) {
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= host_len)
        return 0;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    *port = (int)p;
    return *end == '\0' && p >= 0 && p < 65536;
}

// doc:server begin
static int server(const char *host, int port, int clients) {
    role = "server";
    cordma_config config;
    cordma_config_init(&config);
    config.address = host;
    config.port = port;
    config.listen = true;
    config.timeout_ms = 60000; /* no call waits longer than a minute */
    cordma_context *ctx = cordma_create(&config);
    if (!ctx) {
        failed("cordma_create");
        return 1;
    }
    /* run.sh starts the clients when it sees this line. */
    printf("server: listening on %s:%d\n", host, cordma_local_port(ctx));

    /* 0: accept the clients (peers 0 .. N-1) and learn their IDs. */
    int ids[MAX_CLIENTS];
    int ok = 1;
    for (int i = 0; ok && i < clients; ++i) {
        int32_t id = 0;
        if (cordma_accept(ctx) != i)
            ok = failed("cordma_accept");
        else if (cordma_recv(ctx, i, &id, sizeof id) != (ssize_t)sizeof id)
            ok = failed("cordma_recv of a client's ID");
        ids[i] = id;
        if (ok)
            printf("server: peer %d is client %d, at %s\n", i, id, cordma_peer_address(ctx, i));
    }
    ok = ok && run_rounds(ctx, 0, ids);
    if (ok)
        printf("server: all rounds checked with %d clients\n", clients);
    cordma_destroy(ctx);
    return ok ? 0 : 1;
}
// doc:server end

static int client(const char *host, int port, int id) {
    static char name[32];
    snprintf(name, sizeof name, "client %d", id);
    role = name;
    cordma_config config;
    cordma_config_init(&config);
    /* address NULL: the first RDMA device with an active port. */
    config.timeout_ms = 60000;
    cordma_context *ctx = cordma_create(&config);
    if (!ctx) {
        failed("cordma_create");
        return 1;
    }

    int ok = 1;
    int32_t my_id = id;
    int server_ids[1] = {0}; /* one peer, the server */
    if (cordma_connect(ctx, host, port) != 0)
        ok = failed("cordma_connect");
    else if (cordma_send(ctx, 0, &my_id, sizeof my_id) != 0)
        ok = failed("cordma_send of the ID");
    ok = ok && run_rounds(ctx, id, server_ids);
    if (ok)
        printf("%s: all rounds checked\n", name);
    cordma_destroy(ctx);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines as they come, through a pipe too */
    char host[256];
    int port, n;
    if (argc == 4 && parse_address(argv[2], host, sizeof host, &port)) {
        n = atoi(argv[3]);
        if (strcmp(argv[1], "server") == 0 && n >= 1 && n <= MAX_CLIENTS)
            return server(host, port, n);
        if (strcmp(argv[1], "client") == 0 && n >= 1 && port > 0)
            return client(host, port, n);
    }
    fprintf(stderr, "usage: star server ADDR:PORT N    (1 <= N <= %d; PORT 0: any free port)\n"
                    "       star client ADDR:PORT ID   (ID >= 1)\n",
            MAX_CLIENTS);
    return 2;
}
