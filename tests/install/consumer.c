/* A C program built against an *installed* cordma, the way a C user would
 * build one: `gcc -std=c11 -Wall -Werror consumer.c $(pkg-config --cflags
 * --libs cordma)`. tests/install_test.sh compiles and runs it to prove that
 * cordma.pc suits a C compiler (no C++ flag in it) and that libcordma.so
 * exports the C API. It needs no RDMA device: it checks the defaults, and
 * that cordma_create refuses a bad setting, naming it, before it looks for
 * a device. */
#include <cordma/cordma.h>

#include <stdio.h>
#include <string.h>

static int failures;

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "consumer.c: %s (cordma_last_error(): \"%s\")\n", what, cordma_last_error());
        ++failures;
    }
}

int main(void) {
    expect(strcmp(cordma_last_error(), "") == 0, "an error before any call failed");
    expect(cordma_last_errno() == 0, "an errno before any call failed");

    cordma_config config;
    cordma_config_init(&config);
    expect(config.address == NULL && config.port == 0 && !config.listen, "default address, port, listen");
    expect(config.buffer_size == 4096 && config.window == 16, "default buffer_size 4096, window 16");
    expect(config.timeout_ms == 0 && config.connect_timeout_ms == 10000 && config.peer_timeout_ms == 10000,
           "default timeouts 0, 10000, 10000");
    expect(config.exchange == CORDMA_EXCHANGE_RDMA_CM && config.polling == CORDMA_POLLING_EVENT,
           "default exchange and polling");

    config.buffer_size = 10;
    cordma_context *ctx = cordma_create(&config);
    expect(ctx == NULL, "cordma_create accepted buffer_size 10");
    cordma_destroy(ctx);
    expect(strstr(cordma_last_error(), "buffer_size") != NULL, "the refusal does not name buffer_size");
    expect(cordma_last_errno() != 0, "no errno after a refusal");
    expect(cordma_peer_count(NULL) == -1, "cordma_peer_count(NULL) is not -1");

    if (failures)
        return 1;
    printf("installed cordma's C API: defaults as documented; cordma_create(buffer_size 10): %s\n",
           cordma_last_error());
    return 0;
}
