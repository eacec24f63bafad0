// cordma operations awaited from Asio: the completion comes back on the Asio
// executor's thread, not the listener's.

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include <cordma/asio.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/when_all.hpp>

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

TEST_CASE("a line protocol runs through asio::async_read_until over a cordma stream", "[asio][stream]") {
    builder b;
    b.device(test::test_device_name());
    stream_listener l = stream::serve(b, test::test_address() + ":0");
    // The streams are made with cordma, then handed to Asio.
    auto [server_side, client_side] = sync_wait(when_all(l.accept(), stream::connect(b, l.address())));

    asio::io_context io;
    asio_stream<asio::io_context::executor_type> server(std::move(server_side), io.get_executor());
    asio_stream<asio::io_context::executor_type> client(std::move(client_side), io.get_executor());
    constexpr int lines = 50;
    std::vector<std::string> replies;
    std::error_code server_end;
    std::thread::id handlers_on;

    // The server answers each line with its length, until end of stream.
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::string pending;
        for (;;) {
            std::size_t n = 0;
            try {
                n = co_await asio::async_read_until(server, asio::dynamic_buffer(pending), '\n', asio::use_awaitable);
            } catch (const std::system_error& e) {
                server_end = e.code();
                break;
            }
            std::string line = pending.substr(0, n - 1);
            pending.erase(0, n);
            std::string reply = std::to_string(line.size()) + ":" + line + "\n";
            co_await asio::async_write(server, asio::buffer(reply), asio::use_awaitable);
        }
        co_await async_run(server.next_layer().close(), asio::use_awaitable);
    }, asio::detached);

    // The client writes every line in one go (so lines arrive glued
    // together), half-closes, and reads the replies line by line.
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::string all;
        for (int i = 0; i < lines; ++i)
            all += "line " + std::to_string(i) + std::string(static_cast<std::size_t>(i) * 37, 'x') + "\n";
        co_await asio::async_write(client, asio::buffer(all), asio::use_awaitable);
        co_await async_run(client.next_layer().shutdown_write(), asio::use_awaitable);
        std::string pending;
        for (;;) {
            std::size_t n = 0;
            try {
                n = co_await asio::async_read_until(client, asio::dynamic_buffer(pending), '\n', asio::use_awaitable);
            } catch (const std::system_error&) {
                break;  // the server's end of stream
            }
            replies.push_back(pending.substr(0, n - 1));
            pending.erase(0, n);
        }
        handlers_on = std::this_thread::get_id();
        co_await async_run(client.next_layer().close(), asio::use_awaitable);
    }, asio::detached);
    io.run();

    CHECK(server_end == asio::error::eof);
    CHECK(handlers_on == std::this_thread::get_id());
    REQUIRE(replies.size() == lines);
    for (int i = 0; i < lines; ++i) {
        std::string line = "line " + std::to_string(i) + std::string(static_cast<std::size_t>(i) * 37, 'x');
        CHECK(replies[static_cast<std::size_t>(i)] == std::to_string(line.size()) + ":" + line);
    }
}
