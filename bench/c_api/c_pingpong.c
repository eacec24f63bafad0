/*
 * c_pingpong: a send/receive ping-pong through cordma's C API (cordma.h),
 * to put beside cordma-perf's send ping-pong on the same device (the engine
 * under it) and see what the C API adds per message.
 *
 *   c_pingpong server ADDR SIZE ITERS POLLING        listen on ADDR (any free
 *                                                    port), say "listening on
 *                                                    ADDR:PORT", serve one client
 *   c_pingpong client ADDR:PORT SIZE ITERS POLLING   connect there
 *
 * POLLING is event, busy, yielding or adaptive (cordma_config.polling). The client
 * sends SIZE bytes, the server answers them back, ITERS times after 1000
 * of warm-up; each side checks every byte of every message it gets. The
 * client prints one line:
 *   c_pingpong size=SIZE polling=POLLING iters=ITERS half_rtt_us_avg=X half_rtt_us_p50=Y
 * and both exit non-zero, with cordma_last_error(), on any failure.
 * bench/c_api/run runs both in one tools/rxe-vm boot beside cordma-perf.
 */
#define _POSIX_C_SOURCE 200809L
#include <cordma/cordma.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { WARMUP = 1000 };

static void die(const char *what) {
    fprintf(stderr, "c_pingpong: %s failed: %s\n", what, cordma_last_error());
    exit(1);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Message i's bytes: no two messages alike, so a stale buffer fails. */
static void fill(unsigned char *buf, size_t size, long i) {
    for (size_t k = 0; k < size; ++k)
        buf[k] = (unsigned char)(k * 31u + (unsigned long)i * 7u + 1u);
}

static int matches(const unsigned char *buf, size_t size, long i) {
    for (size_t k = 0; k < size; ++k)
        if (buf[k] != (unsigned char)(k * 31u + (unsigned long)i * 7u + 1u))
            return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 6 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)) {
        fprintf(stderr, "usage: c_pingpong server ADDR SIZE ITERS event|busy|yielding\n"
                        "       c_pingpong client ADDR:PORT SIZE ITERS event|busy|yielding\n");
        return 2;
    }
    int server = strcmp(argv[1], "server") == 0;
    char addr[256];
    snprintf(addr, sizeof addr, "%s", argv[2]);
    int port = 0;
    if (!server) {
        char *colon = strrchr(addr, ':');
        if (!colon) {
            fprintf(stderr, "c_pingpong: client wants ADDR:PORT, got '%s'\n", argv[2]);
            return 2;
        }
        *colon = '\0';
        port = atoi(colon + 1);
    }
    size_t size = (size_t)strtoul(argv[3], NULL, 10);
    long iters = strtol(argv[4], NULL, 10);
    const char *polling = argv[5];
    cordma_config config;
    cordma_config_init(&config);
    if (strcmp(polling, "busy") == 0)
        config.polling = CORDMA_POLLING_BUSY;
    else if (strcmp(polling, "yielding") == 0)
        config.polling = CORDMA_POLLING_YIELDING;
    else if (strcmp(polling, "adaptive") == 0)
        config.polling = CORDMA_POLLING_ADAPTIVE;
    else if (strcmp(polling, "event") != 0) {
        fprintf(stderr, "c_pingpong: polling '%s' is not event, busy, yielding or adaptive\n", polling);
        return 2;
    }
    if (size == 0 || iters <= 0) {
        fprintf(stderr, "c_pingpong: SIZE and ITERS must be positive\n");
        return 2;
    }
    config.address = server ? addr : NULL;  /* the server listens there; the client picks its device by route */
    config.listen = server;
    cordma_context *ctx = cordma_create(&config);
    if (!ctx)
        die("cordma_create");
    if (server) {
        printf("c_pingpong: listening on %s:%d\n", addr, cordma_local_port(ctx));
        fflush(stdout);
        if (cordma_accept(ctx) < 0)
            die("cordma_accept");
    } else if (cordma_connect(ctx, addr, port) < 0) {
        die("cordma_connect");
    }
    unsigned char *out = malloc(size), *in = malloc(size);
    double *samples = malloc(sizeof(double) * (size_t)iters);
    if (!out || !in || !samples) {
        fprintf(stderr, "c_pingpong: out of memory\n");
        return 1;
    }
    long total = WARMUP + iters;
    for (long i = 0; i < total; ++i) {
        if (server) {
            ssize_t got = cordma_recv(ctx, 0, in, size);
            if (got < 0)
                die("cordma_recv");
            if ((size_t)got != size || !matches(in, size, i)) {
                fprintf(stderr, "c_pingpong: message %ld arrived wrong (%zd bytes)\n", i, got);
                return 1;
            }
            if (cordma_send(ctx, 0, in, size) < 0)
                die("cordma_send");
        } else {
            fill(out, size, i);
            double start = now_us();
            if (cordma_send(ctx, 0, out, size) < 0)
                die("cordma_send");
            ssize_t got = cordma_recv(ctx, 0, in, size);
            if (got < 0)
                die("cordma_recv");
            double took = now_us() - start;
            if ((size_t)got != size || !matches(in, size, i)) {
                fprintf(stderr, "c_pingpong: answer %ld arrived wrong (%zd bytes)\n", i, got);
                return 1;
            }
            if (i >= WARMUP)
                samples[i - WARMUP] = took / 2;
        }
    }
    if (!server) {
        double sum = 0;
        for (long i = 0; i < iters; ++i)
            sum += samples[i];
        qsort(samples, (size_t)iters, sizeof(double), compare_doubles);
        printf("c_pingpong size=%zu polling=%s iters=%ld half_rtt_us_avg=%.2f half_rtt_us_p50=%.2f\n", size,
               polling, iters, sum / (double)iters, samples[iters / 2]);
    }
    free(out);
    free(in);
    free(samples);
    cordma_destroy(ctx);
    return 0;
}
