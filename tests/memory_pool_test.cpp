// cordma::memory_pool (<cordma/local_mr.hpp>), on a real device: it
// registers memory in chunks of builder::pool_chunk_size (a larger request
// gets a chunk of its own), up front with builder::pool_initial_size, and a
// connection whose pool has small chunks carries data; the sizes are fixed
// once the pool exists, and less than a page is refused. The builder's
// cache of registrations (builder::local_registration) reuses a
// registration for the same memory, and drops it when the memory is
// unmapped, emptied or moved, so RDMA lands in the pages the program sees.

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

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
    // At `at` only if nothing is there (another thread may have mapped
    // something into the hole since: MAP_FIXED would silently replace it).
    void* p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
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
        std::byte* elsewhere = map_anonymous(size);
        void* moved = mremap(buffer, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, elsewhere);
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

namespace {

/// The unmap watch's reading thread ("cordma-unmap"), pinned to CPU 0 at
/// SCHED_IDLE, and a thread that spins there for 50 ms from each
/// starve(): meanwhile the reader reads an unmap's event late, and the
/// window the kernel leaves between freeing an address and letting its
/// munmap return is wide open; after it, the reader runs (a lookup that
/// rightly waits for it is not kept waiting long). The caller runs on
/// CPU 1. Everything is put back at the end.
class starved_unmap_reader {
public:
    starved_unmap_reader() {
        for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
            std::ifstream comm(task.path() / "comm");
            std::string name;
            if (std::getline(comm, name) && name == "cordma-unmap")
                tid_ = std::stoi(task.path().filename().string());
        }
        REQUIRE(tid_ != 0);
        REQUIRE(sched_getaffinity(tid_, sizeof all_, &all_) == 0);
        REQUIRE(CPU_COUNT(&all_) >= 2);
        cpu_set_t zero, one;
        CPU_ZERO(&zero);
        CPU_SET(0, &zero);
        CPU_ZERO(&one);
        CPU_SET(1, &one);
        REQUIRE(sched_setaffinity(tid_, sizeof zero, &zero) == 0);
        sched_param idle{};
        REQUIRE(sched_setscheduler(tid_, SCHED_IDLE, &idle) == 0);
        REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
        spinner_ = std::thread([this, zero] {
            sched_setaffinity(0, sizeof zero, &zero);
            for (unsigned seen = 0;;) {
                rounds_.wait(seen);
                seen = rounds_.load();
                if (seen == ~0u)
                    return;
                started_.fetch_add(1);
                started_.notify_all();
                auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
                while (std::chrono::steady_clock::now() < until) {
                }
                spun_.fetch_add(1);
                spun_.notify_all();
            }
        });
    }
    /// Starves the reader for the next 50 ms; returns once the spinner has
    /// started (so the caller's unmap comes while it spins).
    void starve() {
        unsigned before = spun_.load(), began = started_.load();
        rounds_.fetch_add(1);
        rounds_.notify_all();
        pending_ = before + 1;
        for (unsigned now = started_.load(); now == began; now = started_.load())
            started_.wait(now);
    }
    /// Waits for the spin starve() began to end.
    void settle() {
        for (unsigned now = spun_.load(); now < pending_; now = spun_.load())
            spun_.wait(now);
    }
    ~starved_unmap_reader() {
        settle();
        rounds_ = ~0u;
        rounds_.notify_all();
        spinner_.join();
        sched_param normal{};
        sched_setscheduler(tid_, SCHED_OTHER, &normal);
        sched_setaffinity(tid_, sizeof all_, &all_);
        sched_setaffinity(0, sizeof all_, &all_);
    }

private:
    pid_t tid_ = 0;
    cpu_set_t all_{};
    std::atomic<unsigned> rounds_{0};
    std::atomic<unsigned> spun_{0};
    std::atomic<unsigned> started_{0};
    unsigned pending_ = 0;
    std::thread spinner_;
};

}  // namespace

TEST_CASE("a lookup sees another thread's unmap of its address, even before that munmap returns",
          "[memory_pool][registration_cache]") {
    // The kernel frees an address before it lets the munmap's caller go
    // (only once the unmap's event has been read): another thread can map
    // new memory there and read into it meanwhile. The lookup must not
    // find the old registration then either. With the unmap watch's
    // reader starved, that window is milliseconds wide in every round.
    builder b = test_builder();
    auto [server, client] = test::adopted_pair(b.event_listener(), b.pd());
    constexpr std::size_t size = 64 << 10;
    local_mr source = b.pool()->allocate(size);
    std::byte* buffer = map_anonymous(size);
    b.local_registration({buffer, size});  // the watch's thread exists from here
    int landed = 0, early = 0;
    constexpr int rounds = 20;
    {
        starved_unmap_reader starved;
        for (int round = 0; round < rounds; ++round) {
            b.local_registration({buffer, size});  // kept (registered in the round before)
            starved.starve();
            std::atomic<bool> returned{false};
            std::thread unmapper([&] {
                munmap(buffer, size);
                returned = true;
            });
            void* again = MAP_FAILED;
            while (again == MAP_FAILED) {
                again = mmap(buffer, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                             -1, 0);
                REQUIRE((again != MAP_FAILED || errno == EEXIST));
            }
            REQUIRE(again == buffer);
            if (!returned)
                ++early;  // the new memory is there while the munmap still waits
            for (std::size_t i = 0; i < size; ++i)
                source.data()[i] = std::byte(static_cast<unsigned char>(i + round));
            if (read_lands(client, b.local_registration({buffer, size}), source))
                ++landed;
            unmapper.join();
            starved.settle();
        }
    }
    INFO(early << " of " << rounds << " rounds mapped the address while its munmap had not returned");
    CHECK(early > 0);
    CHECK(landed == rounds);
    CHECK(b.registration_stats().unmapped >= rounds);
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
    CHECK(b.registration_stats().not_kept == three.not_kept + 1);
    CHECK(b.registration_stats().entries == 2);
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
