/* mpi_collectives: Open MPI's collectives timed the way cordma_collectives
 * times cordma::group's, so that bench/collectives/run can put the two side
 * by side.
 *
 * For every collective and size: one untimed call whose result is checked
 * (a benchmark that moves the wrong bytes is worthless), warm-up calls, then
 * `iters` timed calls. Each timed call is preceded by an untimed barrier, so
 * every rank starts it together (to within the barrier's exit skew); each
 * rank times its own call with CLOCK_MONOTONIC, and the iteration's time is
 * the largest over the ranks (MPI_Reduce MAX after the loop, untimed): the
 * time until the collective has finished everywhere, which is what a caller
 * of the next collective waits for. p50 and p90 are nearest-rank percentiles
 * of those per-iteration maxima.
 *
 * Sizes: for bcast and allreduce the whole buffer (allreduce: MPI_DOUBLE,
 * sum); for alltoall and allgather the block each rank sends to each rank
 * (alltoall's send buffer is ranks * bytes). Barrier moves nothing (bytes 0).
 *
 * Output: one JSON object per line on rank 0's stdout, e.g.
 *   {"impl":"mpi","op":"bcast","bytes":4096,"ranks":4,"p50_us":..,"p90_us":..,"iters":..}
 * Progress and errors go to stderr. Exit status 1 if a check failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum op { OP_BARRIER, OP_BCAST, OP_ALLTOALL, OP_ALLGATHER, OP_ALLREDUCE, OP_COUNT };
static const char* const op_names[OP_COUNT] = {"barrier", "bcast", "alltoall", "allgather", "allreduce"};

/* The same iteration rule as cordma_collectives.cpp: `iters` for small
 * messages, fewer for large ones so that a size costs about as many bytes
 * moved as iters calls of 32 KiB (Soft-RoCE in a TCG VM moves ~50 MB/s;
 * 200 all-to-alls of 1 MiB blocks would take minutes), but never fewer than
 * min_iters (below that a p90 means little). */
static int iterations_for(size_t bytes, int iters, int min_iters) {
    const size_t budget = (size_t)iters * 32768;
    size_t n = bytes > 32768 ? budget / bytes : (size_t)iters;
    if (n < (size_t)min_iters) n = (size_t)min_iters;
    if (n > (size_t)iters) n = (size_t)iters;
    return (int)n;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p of the samples at or below it. */
static double percentile(const double* sorted, int n, double p) {
    int k = (int)ceil(p * n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return sorted[k - 1];
}

/* The byte every rank's data holds at index i: who sent it, where, and for
 * whom, so a block landing in the wrong place or from the wrong rank shows. */
static unsigned char pattern(int from, int to, size_t i) {
    return (unsigned char)(from * 31 + to * 7 + i * 13 + (i >> 8) + 1);
}

struct bufs {
    unsigned char* send;
    unsigned char* recv;
};

/* Fills the send side for `op` and poisons the receive side. */
static void prepare(enum op op, size_t bytes, int rank, int ranks, struct bufs* b) {
    size_t i;
    int r;
    switch (op) {
    case OP_BARRIER:
        break;
    case OP_BCAST:
        for (i = 0; i < bytes; i++) b->send[i] = rank == 0 ? pattern(0, 0, i) : 0xee;
        break;
    case OP_ALLTOALL:
        for (r = 0; r < ranks; r++)
            for (i = 0; i < bytes; i++) b->send[(size_t)r * bytes + i] = pattern(rank, r, i);
        memset(b->recv, 0xee, (size_t)ranks * bytes);
        break;
    case OP_ALLGATHER:
        for (i = 0; i < bytes; i++) b->send[i] = pattern(rank, 0, i);
        memset(b->recv, 0xee, (size_t)ranks * bytes);
        break;
    case OP_ALLREDUCE: {
        /* Small integers: every partial sum is exact in a double, whatever
         * order the ranks' values are added in. */
        double* d = (double*)b->send;
        for (i = 0; i < bytes / sizeof(double); i++) d[i] = (double)(rank + 1) * (double)(i % 1000 + 1);
        memset(b->recv, 0xee, bytes);
        break;
    }
    default:
        break;
    }
}

/* 0 if the result is right, else prints the first wrong byte and returns 1. */
static int check(enum op op, size_t bytes, int rank, int ranks, const struct bufs* b) {
    size_t i;
    int r;
    switch (op) {
    case OP_BARRIER:
        return 0;
    case OP_BCAST:
        for (i = 0; i < bytes; i++)
            if (b->send[i] != pattern(0, 0, i)) {
                fprintf(stderr, "mpi_collectives: rank %d: bcast %zu B: byte %zu is %#x, expected %#x\n", rank,
                        bytes, i, b->send[i], pattern(0, 0, i));
                return 1;
            }
        return 0;
    case OP_ALLTOALL:
        for (r = 0; r < ranks; r++)
            for (i = 0; i < bytes; i++)
                if (b->recv[(size_t)r * bytes + i] != pattern(r, rank, i)) {
                    fprintf(stderr, "mpi_collectives: rank %d: alltoall %zu B: block %d byte %zu is %#x, expected %#x\n",
                            rank, bytes, r, i, b->recv[(size_t)r * bytes + i], pattern(r, rank, i));
                    return 1;
                }
        return 0;
    case OP_ALLGATHER:
        for (r = 0; r < ranks; r++)
            for (i = 0; i < bytes; i++)
                if (b->recv[(size_t)r * bytes + i] != pattern(r, 0, i)) {
                    fprintf(stderr, "mpi_collectives: rank %d: allgather %zu B: block %d byte %zu is %#x, expected %#x\n",
                            rank, bytes, r, i, b->recv[(size_t)r * bytes + i], pattern(r, 0, i));
                    return 1;
                }
        return 0;
    case OP_ALLREDUCE: {
        const double* d = (const double*)b->recv;
        const double ranksum = (double)ranks * (ranks + 1) / 2;
        for (i = 0; i < bytes / sizeof(double); i++)
            if (d[i] != ranksum * (double)(i % 1000 + 1)) {
                fprintf(stderr, "mpi_collectives: rank %d: allreduce %zu B: element %zu is %g, expected %g\n", rank,
                        bytes, i, d[i], ranksum * (double)(i % 1000 + 1));
                return 1;
            }
        return 0;
    }
    default:
        return 1;
    }
}

static void run_op(enum op op, size_t bytes, const struct bufs* b) {
    switch (op) {
    case OP_BARRIER:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
    case OP_BCAST:
        /* In place in `send`: root's bytes into everyone's. */
        MPI_Bcast(b->send, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case OP_ALLTOALL:
        MPI_Alltoall(b->send, (int)bytes, MPI_BYTE, b->recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case OP_ALLGATHER:
        MPI_Allgather(b->send, (int)bytes, MPI_BYTE, b->recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case OP_ALLREDUCE:
        MPI_Allreduce(b->send, b->recv, (int)(bytes / sizeof(double)), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        break;
    default:
        break;
    }
}

static void usage(FILE* out) {
    fprintf(out,
            "usage: mpirun ... mpi_collectives [options]\n"
            "  -n, --iters N       timed calls per collective and size, small sizes (default 200)\n"
            "      --min-iters N   fewest timed calls at large sizes (default 10)\n"
            "  -w, --warmup N      untimed calls before timing (default: iterations/10, at least 2)\n"
            "      --min-size B    smallest size in bytes (default 8)\n"
            "  -m, --max-size B    largest size in bytes (default 1048576)\n"
            "  -o, --ops LIST      comma-separated: barrier,bcast,alltoall,allgather,allreduce (default all)\n"
            "Sizes: 8, 64, 512, 4096, 32768, 262144 and 1048576 bytes, those within [min-size, max-size].\n"
            "One JSON line per collective and size on rank 0's stdout.\n");
}

static long parse_count(const char* what, const char* s, long lo, long hi) {
    char* end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "mpi_collectives: %s wants a number from %ld to %ld, got '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char** argv) {
    static const struct option long_opts[] = {
        {"iters", required_argument, 0, 'n'},   {"min-iters", required_argument, 0, 'i'},
        {"warmup", required_argument, 0, 'w'},  {"min-size", required_argument, 0, 's'},
        {"max-size", required_argument, 0, 'm'}, {"ops", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int iters = 200, min_iters = 10, warmup = -1;
    long min_size = 8, max_size = 1 << 20;
    int want[OP_COUNT] = {1, 1, 1, 1, 1};
    int rank, ranks, c, failed = 0;
    /* Powers of 8 from 8 B, then 1 MiB: the same list as cordma_collectives. */
    static const size_t all_sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576};
    size_t sizes[sizeof all_sizes / sizeof all_sizes[0]];
    int nsizes = 0;
    size_t largest = 0;
    struct bufs b;
    double *times, *maxima;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);

    /* Every rank parses the same arguments, so they all agree without a
     * broadcast; only rank 0 talks about mistakes. */
    opterr = rank == 0;
    while ((c = getopt_long(argc, argv, "n:w:m:o:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'n': iters = (int)parse_count("--iters", optarg, 1, 1000000); break;
        case 'i': min_iters = (int)parse_count("--min-iters", optarg, 1, 1000000); break;
        case 'w': warmup = (int)parse_count("--warmup", optarg, 0, 1000000); break;
        case 's': min_size = parse_count("--min-size", optarg, 8, 1L << 30); break;
        case 'm': max_size = parse_count("--max-size", optarg, 8, 1L << 30); break;
        case 'o': {
            char* list = strdup(optarg);
            char* save = NULL;
            char* tok;
            int k;
            memset(want, 0, sizeof want);
            for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                for (k = 0; k < OP_COUNT && strcmp(tok, op_names[k]) != 0; k++) {}
                if (k == OP_COUNT) {
                    if (rank == 0)
                        fprintf(stderr, "mpi_collectives: unknown op '%s' (barrier,bcast,alltoall,allgather,allreduce)\n",
                                tok);
                    MPI_Finalize();
                    return 2;
                }
                want[k] = 1;
            }
            free(list);
            break;
        }
        case 'h':
            if (rank == 0) usage(stdout);
            MPI_Finalize();
            return 0;
        default:
            if (rank == 0) usage(stderr);
            MPI_Finalize();
            return 2;
        }
    }
    if (min_iters > iters) min_iters = iters;

    for (c = 0; c < (int)(sizeof all_sizes / sizeof all_sizes[0]); c++)
        if (all_sizes[c] >= (size_t)min_size && all_sizes[c] <= (size_t)max_size) sizes[nsizes++] = all_sizes[c];
    for (c = 0; c < nsizes; c++)
        if (sizes[c] > largest) largest = sizes[c];

    /* alltoall and allgather need ranks blocks; page-aligned like the
     * registered buffers cordma uses. */
    if (posix_memalign((void**)&b.send, 4096, (size_t)ranks * (largest ? largest : 8)) ||
        posix_memalign((void**)&b.recv, 4096, (size_t)ranks * (largest ? largest : 8))) {
        fprintf(stderr, "mpi_collectives: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    times = malloc(sizeof(double) * (size_t)iters);
    maxima = malloc(sizeof(double) * (size_t)iters);

    for (c = 0; c < OP_COUNT; c++) {
        enum op op = (enum op)c;
        int k, nk = op == OP_BARRIER ? 1 : nsizes;
        if (!want[op]) continue;
        for (k = 0; k < nk; k++) {
            const size_t bytes = op == OP_BARRIER ? 0 : sizes[k];
            const int n = iterations_for(bytes, iters, min_iters);
            const int w = warmup >= 0 ? warmup : (n / 10 > 2 ? n / 10 : 2);
            int i, bad, anybad;
            double t0;

            prepare(op, bytes, rank, ranks, &b);
            MPI_Barrier(MPI_COMM_WORLD);
            run_op(op, bytes, &b);
            bad = check(op, bytes, rank, ranks, &b);
            MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (anybad) {
                if (rank == 0) fprintf(stderr, "mpi_collectives: %s %zu B moved wrong bytes: not timed\n", op_names[op], bytes);
                failed = 1;
                continue;
            }

            for (i = 0; i < w; i++) run_op(op, bytes, &b);
            for (i = 0; i < n; i++) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = now_us();
                run_op(op, bytes, &b);
                times[i] = now_us() - t0;
            }
            MPI_Reduce(times, maxima, n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                qsort(maxima, (size_t)n, sizeof(double), cmp_double);
                printf("{\"impl\":\"mpi\",\"op\":\"%s\",\"bytes\":%zu,\"ranks\":%d,\"p50_us\":%.3f,\"p90_us\":%.3f,"
                       "\"min_us\":%.3f,\"max_us\":%.3f,\"iters\":%d,\"warmup\":%d}\n",
                       op_names[op], bytes, ranks, percentile(maxima, n, 0.5), percentile(maxima, n, 0.9), maxima[0],
                       maxima[n - 1], n, w);
                fflush(stdout);
            }
        }
    }

    free(times);
    free(maxima);
    free(b.send);
    free(b.recv);
    MPI_Finalize();
    return failed;
}
