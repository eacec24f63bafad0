// cordma::memory_pool (<cordma/local_mr.hpp>), on a real device: it
// registers memory in chunks of builder::pool_chunk_size (a larger request
// gets a chunk of its own), up front with builder::pool_initial_size, and a
// connection whose pool has small chunks carries data; the sizes are fixed
// once the pool exists, and less than a page is refused.

#include <stdexcept>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>

#include "support/pool_round_trip.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using test::round_trip;
using test::test_builder;

TEST_CASE("the pool registers in chunks of builder::pool_chunk_size, and up front with pool_initial_size",
          "[memory_pool]") {
    SECTION("small chunks") {
        builder b = test_builder();
        b.pool_chunk_size(64 << 10);
        auto pool = b.pool();
        CHECK(pool->chunk_size() == (64u << 10));
        CHECK(pool->bytes_registered() == 0);
        local_mr a = pool->allocate(1000);
        CHECK(pool->bytes_registered() == (64u << 10));
        local_mr big = pool->allocate(100 << 10);  // larger than a chunk: a chunk of its own
        CHECK(pool->chunk_count() == 2);
        CHECK(pool->bytes_registered() == (64u << 10) + (100u << 10));
    }
    SECTION("registered up front") {
        builder b = test_builder();
        b.pool_chunk_size(64 << 10).pool_initial_size(200 << 10);
        auto pool = b.pool();
        CHECK(pool->chunk_count() == 4);  // 200 KiB in 64 KiB chunks
        CHECK(pool->bytes_registered() == (256u << 10));
        local_mr a = pool->allocate(100 << 10);
        CHECK(pool->chunk_count() == 5);  // larger than a chunk
    }
    SECTION("a connection made with small chunks carries data") {
        builder b = test_builder();
        b.pool_chunk_size(16 << 10);
        CHECK(sync_wait(round_trip(b)) == "bytes that crossed rxe under a small memlock limit");
        CHECK(b.pool()->chunk_size() == (16u << 10));
    }
    SECTION("once the pool exists, a different size is refused, not ignored") {
        builder b = test_builder();
        b.pool();
        CHECK_THROWS_WITH(b.pool_chunk_size(1 << 20), Catch::Contains("builder::pool_chunk_size(1048576)") &&
                                                           Catch::Contains("already exists"));
        CHECK_THROWS_WITH(b.pool_initial_size(1 << 20), Catch::Contains("builder::pool_initial_size(1048576)"));
        CHECK_NOTHROW(b.pool_chunk_size(4 << 20));  // the size it has
    }
    SECTION("less than a page is refused") {
        builder b;
        CHECK_THROWS_AS(b.pool_chunk_size(4095), std::invalid_argument);
        connection_settings s;
        s.pool_chunk_size = 100;
        builder direct(s);
        direct.device(test::test_device_name());
        CHECK_THROWS_WITH(direct.pool(), Catch::Contains("pool_chunk_size=100"));
    }
}
