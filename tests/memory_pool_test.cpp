// cordma::memory_pool (<cordma/local_mr.hpp>), on a real device: it
// registers memory in chunks of builder::pool_chunk_size (a larger request
// gets a chunk of its own), up front with builder::pool_initial_size, and a
// connection whose pool has small chunks carries data; the sizes are fixed
// once the pool exists, and less than a page is refused. The builder's
// cache of registrations (builder::local_registration) reuses a
// registration for the same memory, and drops it when the memory is
// unmapped, emptied or moved, so RDMA lands in the pages the program sees.

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/sync_wait.hpp>

#include "support/loopback_pair.hpp"

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

namespace {

/// `size` bytes of fresh anonymous memory at `at` (anywhere when null).
std::byte* map_anonymous(std::size_t size, void* at = nullptr) {
    void* p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    REQUIRE(p != MAP_FAILED);
    return static_cast<std::byte*>(p);
}

/// Reads `source` into `target` over `conn`; true when `target`'s bytes,
/// as the program sees them, are then `source`'s.
bool read_lands(connection& conn, local_slice target, const local_mr& source) {
    sync_wait(conn.read(target, source.slice(0, target.size()).remote()));
    return std::memcmp(target.data(), source.data(), target.size()) == 0;
}

}  // namespace

TEST_CASE("builder::local_registration keeps a registration until its memory leaves the address space",
          "[memory_pool][registration_cache]") {
    builder b = test_builder();
    auto [server, client] = test::adopted_pair(b.event_listener(), b.pd());
    constexpr std::size_t size = 2 << 20;
    local_mr source = b.pool()->allocate(size);
    auto fill = [&](unsigned char seed) {
        for (std::size_t i = 0; i < size; ++i)
            source.data()[i] = std::byte(static_cast<unsigned char>(i * 7 + seed));
    };
    registration_cache_stats before = b.registration_stats();
    REQUIRE(before.unavailable.empty());
    CHECK(before.capacity == (256u << 20));

    std::byte* buffer = map_anonymous(size);
    fill(1);
    {
        local_slice whole = b.local_registration({buffer, size});
        local_slice part = b.local_registration({buffer + 4096, 8192});
        CHECK(part.lkey() == whole.lkey());
        CHECK(read_lands(client, whole, source));
        local_slice again = b.local_registration({buffer, size});
        CHECK(again.lkey() == whole.lkey());
    }
    registration_cache_stats kept = b.registration_stats();
    CHECK(kept.misses == before.misses + 1);
    CHECK(kept.hits == before.hits + 2);
    CHECK(kept.entries == before.entries + 1);
    CHECK(kept.bytes == before.bytes + size);

    SECTION("unmapped and mapped again at the same address") {
        REQUIRE(munmap(buffer, size) == 0);
        REQUIRE(map_anonymous(size, buffer) == buffer);
        fill(2);
        CHECK(read_lands(client, b.local_registration({buffer, size}), source));
        registration_cache_stats after = b.registration_stats();
        CHECK(after.unmapped == kept.unmapped + 1);
        CHECK(after.misses == kept.misses + 1);
        CHECK(after.entries == kept.entries);
    }
    SECTION("emptied by madvise(MADV_DONTNEED)") {
        REQUIRE(madvise(buffer + (1 << 20), 4096, MADV_DONTNEED) == 0);
        fill(3);
        CHECK(read_lands(client, b.local_registration({buffer, size}), source));
        CHECK(b.registration_stats().unmapped == kept.unmapped + 1);
    }
    SECTION("moved by mremap, and new memory mapped where it was") {
        void* moved = mremap(buffer, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, map_anonymous(size));
        REQUIRE(moved != MAP_FAILED);
        REQUIRE(map_anonymous(size, buffer) == buffer);
        fill(4);
        CHECK(read_lands(client, b.local_registration({buffer, size}), source));
        CHECK(b.registration_stats().unmapped == kept.unmapped + 1);
        munmap(moved, size);
    }
    SECTION("a slice in use keeps its registration, and a new one is made beside it") {
        local_slice held = b.local_registration({buffer, size});
        REQUIRE(munmap(buffer, size) == 0);
        REQUIRE(map_anonymous(size, buffer) == buffer);
        fill(5);
        local_slice fresh = b.local_registration({buffer, size});
        CHECK(fresh.lkey() != held.lkey());
        CHECK(read_lands(client, fresh, source));
    }
    munmap(buffer, size);
    sync_wait(client.close());
    sync_wait(server.close());
}

TEST_CASE("the cache of registrations stays within registration_cache_size, idle ones going first",
          "[memory_pool][registration_cache]") {
    builder b = test_builder();
    b.registration_cache_size(1 << 20);
    std::byte* memory = map_anonymous(4 << 20);
    auto piece = [&](int i) { return std::span<std::byte>(memory + i * (512 << 10), 512 << 10); };
    local_slice first = b.local_registration(piece(0));
    b.local_registration(piece(1));
    registration_cache_stats two = b.registration_stats();
    CHECK(two.capacity == (1u << 20));
    CHECK(two.entries == 2);
    CHECK(two.bytes == (1u << 20));
    b.local_registration(piece(2));  // piece 1 is idle, piece 0 in use: piece 1 goes
    registration_cache_stats three = b.registration_stats();
    CHECK(three.evicted == two.evicted + 1);
    CHECK(three.entries == 2);
    CHECK(b.local_registration(piece(0)).lkey() == first.lkey());
    CHECK(b.registration_stats().hits == three.hits + 1);
    // Larger than the whole cache: registered for the call, not kept.
    local_slice large = b.local_registration({memory, 2 << 20});
    CHECK(large.size() == (2u << 20));
    CHECK(b.registration_stats().not_kept == three.not_kept + 1);
    CHECK_THROWS_WITH(b.registration_cache_size(2 << 20), Catch::Contains("builder::registration_cache_size(2097152)") &&
                                                              Catch::Contains("set it before those"));
    CHECK_THROWS_AS(b.local_registration({}), std::invalid_argument);
    first = {};
    large = {};
    munmap(memory, 4 << 20);

    builder none = test_builder();
    none.registration_cache_size(0);
    std::byte* one = map_anonymous(1 << 20);
    local_slice a = none.local_registration({one, 1 << 20});
    local_slice c = none.local_registration({one, 1 << 20});
    registration_cache_stats off = none.registration_stats();
    CHECK(off.entries == 0);
    CHECK(off.not_kept == 2);
    CHECK(off.hits == 0);
    a = {};
    c = {};
    munmap(one, 1 << 20);
}
