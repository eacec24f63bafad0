// cordma operations awaited from Asio: the completion comes back on the Asio
// executor's thread, not the listener's.

#include <cstring>
#include <thread>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include <cordma/asio.hpp>
#include <cordma/connection.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;

TEST_CASE("an asio::awaitable coroutine awaits cordma operations and resumes on its executor", "[asio]") {
    auto listener = event_listener::start(test::open_test_device());
    auto [client, server] = connect_loopback(listener);
    auto pool = memory_pool::create(client.qp()->pd());
    local_mr source = pool->allocate(128);
    local_mr target = pool->allocate(128);
    std::memset(source.data(), 0x5c, 128);

    asio::io_context io;
    std::thread::id resumed_on;
    std::uint64_t old_value = 1;
    bool caught = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await async_run([&]() -> task<void> { co_await client.write(source.all(), target.remote()); }(),
                           asio::use_awaitable);
        resumed_on = std::this_thread::get_id();
        old_value = co_await async_run(
            [&]() -> task<std::uint64_t> { co_return co_await client.fetch_add(target.remote().slice(0, 8), 1); }(),
            asio::use_awaitable);
        try {
            co_await async_run([&]() -> task<void> { co_await client.write(source.slice(0, 1), target.remote()); }(),
                               asio::use_awaitable);
        } catch (const std::invalid_argument&) {
            caught = true;
        }
    }, asio::detached);
    io.run();

    CHECK(resumed_on == std::this_thread::get_id());
    CHECK(!listener->running_in_this_thread());
    CHECK(old_value == 0x5c5c5c5c5c5c5c5cULL);
    CHECK(std::to_integer<int>(target.data()[100]) == 0x5c);
    CHECK(caught);
}

TEST_CASE("a plain callback gets the result on the io_context thread", "[asio]") {
    auto listener = event_listener::start(test::open_test_device());
    auto [client, server] = connect_loopback(listener);
    auto pool = memory_pool::create(client.qp()->pd());
    local_mr word = pool->allocate(8);
    std::memset(word.data(), 0, 8);
    asio::io_context io;
    std::thread::id called_on;
    std::uint64_t got = 99;
    async_run([&]() -> task<std::uint64_t> { co_return co_await client.compare_swap(word.remote(), 0, 7); }(),
              asio::bind_executor(io, [&](std::exception_ptr error, std::uint64_t old) {
                  REQUIRE(!error);
                  called_on = std::this_thread::get_id();
                  got = old;
              }));
    io.run();
    CHECK(called_on == std::this_thread::get_id());
    CHECK(got == 0);
    std::uint64_t now;
    std::memcpy(&now, word.data(), 8);
    CHECK(now == 7);
}
