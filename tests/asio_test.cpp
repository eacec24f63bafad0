// cordma operations as Asio asynchronous operations: every completion token
// kind, cancellation through Asio's slots, the executor handlers run on, and
// the error codes they get; async_run for whole tasks; a cordma stream as an
// Asio stream. Real bytes over rxe, content checked.

#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <catch2/catch.hpp>

#include <cordma/asio.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/stream.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/when_all.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;

// Asio 1.24 moved deferred and as_tuple out of experimental.
#if ASIO_VERSION >= 102400
namespace tokens = asio;
#else
namespace tokens = asio::experimental;
#endif

namespace {

/// A loopback pair and memory on it.
struct pair_fixture {
    std::shared_ptr<event_listener> listener = event_listener::start(test::open_test_device());
    std::pair<connection, connection> pair = connect_loopback(listener);
    connection& client = pair.first;
    connection& server = pair.second;
    std::shared_ptr<memory_pool> pool = memory_pool::create(client.qp()->pd());

    local_mr filled(std::size_t size, char c) {
        local_mr m = pool->allocate(size);
        std::memset(m.data(), c, size);
        return m;
    }
};

/// Runs `io` until `done`, for at most 30 s: no test waits forever.
void run_until(asio::io_context& io, const bool& done, const char* what, const std::string& failure = {},
               const std::string& stage = {}) {
    auto start = std::chrono::steady_clock::now();
    io.run_for(30s);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    INFO("still waiting for: " << what << " after " << ms << " ms (io_context " << (io.stopped() ? "out of work" : "running") << ")" << (stage.empty() ? "" : ", at: ") << stage
                              << (failure.empty() ? "" : ", failed: ") << failure);
    REQUIRE(done);
}

/// co_spawn's completion: records the exception's text, if any.
auto record_failure(std::string& failure) {
    return [&failure](std::exception_ptr e) {
        if (!e)
            return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            failure = x.what();
        }
    };
}

std::string text_of(const local_mr& m, std::size_t n) { return std::string(reinterpret_cast<const char*>(m.data()), n); }

void put(local_mr& m, const std::string& text) { std::memcpy(m.data(), text.data(), text.size()); }

task<recv_result> recv_task(connection c, local_slice into, std::stop_token stop) {
    co_return co_await c.recv(into, std::move(stop));
}

}  // namespace

TEST_CASE("use_awaitable: operations are co_awaited in an asio::awaitable and resume on its executor", "[asio][tokens]") {
    pair_fixture f;
    local_mr source = f.pool->allocate(256);
    for (std::size_t i = 0; i < 256; ++i)
        source.data()[i] = static_cast<std::byte>(i * 7 + 1);
    local_mr target = f.pool->allocate_zeroed(256);
    local_mr back = f.pool->allocate_zeroed(256);
    std::uint64_t word8, word16;
    std::memcpy(&word8, source.data() + 8, 8);
    std::memcpy(&word16, source.data() + 16, 8);
    asio::io_context io;
    std::vector<std::thread::id> resumed_on;
    std::vector<bool> on_listener;
    std::uint64_t old_value = 0, swapped_from = 0;
    recv_result got;
    std::string failure;
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto note = [&] {
            resumed_on.push_back(std::this_thread::get_id());
            on_listener.push_back(f.listener->running_in_this_thread());
        };
        co_await async_write(f.client, source.all(), target.remote(), asio::use_awaitable);
        note();
        co_await async_read(f.client, back.slice(0, 128), target.remote().slice(0, 128), asio::use_awaitable);
        note();
        old_value = co_await async_fetch_add(f.client, target.remote().slice(8, 8), 5, asio::use_awaitable);
        note();
        swapped_from = co_await async_compare_swap(f.client, target.remote().slice(16, 8), word16, 9,
                                                   asio::use_awaitable);
        note();
        // A gathering write and a scattering read (the span's slices are
        // copied in the call).
        std::vector<local_slice> parts{source.slice(0, 100), source.slice(100, 28)};
        co_await async_write(f.client, parts, target.remote().slice(128, 128), asio::use_awaitable);
        std::vector<local_slice> halves{back.slice(128, 64), back.slice(192, 64)};
        co_await async_read(f.client, halves, target.remote().slice(128, 128), asio::use_awaitable);
        note();
        // A recv started as a future (it completes on Asio's system
        // executor), then the send with an immediate it receives.
        std::future<recv_result> pending = async_recv(f.server, target.slice(0, 64), asio::use_future);
        put(source, "imm");
        co_await async_send_with_imm(f.client, source.slice(0, 3), 77, asio::use_awaitable);
        note();
        if (pending.wait_for(30s) != std::future_status::ready)
            throw std::runtime_error("the recv did not complete within 30 s of the send");
        got = pending.get();
        done = true;
    }, record_failure(failure));
    run_until(io, done, "the use_awaitable coroutine", failure);
    CHECK(failure.empty());
    REQUIRE(resumed_on.size() == 6);
    for (std::size_t i = 0; i < resumed_on.size(); ++i) {
        CHECK(resumed_on[i] == std::this_thread::get_id());
        CHECK(!on_listener[i]);
    }
    CHECK(std::memcmp(back.data() + 24, source.data() + 24, 104) == 0);
    CHECK(old_value == word8);
    CHECK(swapped_from == word16);
    std::uint64_t now8, now16;
    std::memcpy(&now8, target.data() + 8, 8);
    std::memcpy(&now16, target.data() + 16, 8);
    CHECK(now8 == word8 + 5);
    CHECK(now16 == 9);
    // back[128..256) came from target[128..256), written from source[0..128).
    CHECK(std::memcmp(back.data() + 128 + 3, source.data() + 3, 125) == 0);
    CHECK(got.length == 3);
    CHECK(got.imm == std::optional<std::uint32_t>(77));
    CHECK(text_of(target, 3) == "imm");
}

TEST_CASE("use_awaitable: an error completes the co_await with a std::system_error carrying the code", "[asio][tokens]") {
    pair_fixture f;
    local_mr source = f.filled(64, 1);
    local_mr target = f.pool->allocate_zeroed(128);
    asio::io_context io;
    std::error_code sizes, empty_handle;
    bool done = false;
    std::string failure;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        try {
            // The sizes differ: cordma's std::invalid_argument, as a code.
            co_await async_write(f.client, source.all(), target.remote(), asio::use_awaitable);
        } catch (const std::system_error& e) {
            sizes = e.code();
        }
        try {
            co_await async_send(connection{}, source.all(), asio::use_awaitable);
        } catch (const std::system_error& e) {
            empty_handle = e.code();
        }
        done = true;
    }, record_failure(failure));
    run_until(io, done, "the failing operations", failure);
    CHECK(failure.empty());
    CHECK(sizes == std::errc::invalid_argument);
    CHECK(empty_handle == std::errc::operation_not_permitted);
    // Nothing was written.
    CHECK(target.data()[0] == std::byte{0});
}

TEST_CASE("a plain callback runs on its bound executor, never on the listener, never inside the call", "[asio][tokens]") {
    pair_fixture f;
    local_mr word = f.pool->allocate_zeroed(8);
    asio::io_context io;
    std::thread::id called_on;
    bool inside_call = true, on_listener = true, done = false;
    std::error_code error = std::make_error_code(std::errc::io_error);
    std::uint64_t old = 99;
    async_compare_swap(f.client, word.remote(), 0, 7,
                       asio::bind_executor(io, [&](std::error_code ec, std::uint64_t value) {
                           called_on = std::this_thread::get_id();
                           on_listener = f.listener->running_in_this_thread();
                           error = ec;
                           old = value;
                           done = true;
                       }));
    inside_call = done;
    run_until(io, done, "the compare_swap callback");
    CHECK(!inside_call);
    CHECK(!error);
    CHECK(called_on == std::this_thread::get_id());
    CHECK(!on_listener);
    CHECK(old == 0);
    std::uint64_t now;
    std::memcpy(&now, word.data(), 8);
    CHECK(now == 7);

    SECTION("a callback with no executor of its own runs on asio::system_executor's pool") {
        std::promise<std::pair<std::error_code, bool>> result;
        async_fetch_add(f.client, word.remote(), 1, [&](std::error_code ec, std::uint64_t value) {
            result.set_value({ec, value == 7 && !f.listener->running_in_this_thread()});
        });
        auto got = result.get_future();
        REQUIRE(got.wait_for(30s) == std::future_status::ready);
        auto [ec, right] = got.get();
        CHECK(!ec);
        CHECK(right);
    }
}

TEST_CASE("use_future: a recv and a send as futures, without an io_context", "[asio][tokens]") {
    pair_fixture f;
    local_mr out = f.pool->allocate(32);
    local_mr in = f.pool->allocate_zeroed(32);
    put(out, "through a future");
    std::future<recv_result> received = async_recv(f.server, in.all(), asio::use_future);
    std::future<void> sent = async_send(f.client, out.slice(0, 16), asio::use_future);
    REQUIRE(sent.wait_for(30s) == std::future_status::ready);
    REQUIRE(received.wait_for(30s) == std::future_status::ready);
    sent.get();
    recv_result r = received.get();
    CHECK(r.length == 16);
    CHECK(!r.imm);
    CHECK(text_of(in, 16) == "through a future");

    SECTION("an error is the future's std::system_error") {
        std::future<void> bad = async_write(f.client, out.slice(0, 1), in.remote(), asio::use_future);
        REQUIRE(bad.wait_for(30s) == std::future_status::ready);
        std::error_code code;
        try {
            bad.get();
        } catch (const std::system_error& e) {
            code = e.code();
        }
        CHECK(code == std::errc::invalid_argument);
    }
}

TEST_CASE("deferred: nothing starts until the deferred operation is launched", "[asio][tokens]") {
    pair_fixture f;
    local_mr source = f.filled(64, 0x42);
    local_mr target = f.pool->allocate_zeroed(64);
    asio::io_context io;
    auto write = async_write(f.client, source.all(), target.remote(), tokens::deferred);
    auto read_back = async_fetch_add(f.client, target.remote().slice(0, 8), 1, tokens::deferred);
    // Give a started write every chance to land: a read on the same QP
    // completes after any write posted before it.
    local_mr probe = f.pool->allocate_zeroed(64);
    sync_wait(f.client.read(probe.all(), target.remote()));
    CHECK(probe.data()[0] == std::byte{0});

    bool done = false;
    std::error_code write_error, add_error;
    std::uint64_t old = 0;
    std::move(write)(asio::bind_executor(io, [&](std::error_code ec) {
        write_error = ec;
        std::move(read_back)(asio::bind_executor(io, [&](std::error_code ec2, std::uint64_t value) {
            add_error = ec2;
            old = value;
            done = true;
        }));
    }));
    run_until(io, done, "the deferred write and fetch_add");
    CHECK(!write_error);
    CHECK(!add_error);
    CHECK(old == 0x4242424242424242ULL);
    CHECK(text_of(target, 64).substr(8) == std::string(56, 0x42));
}

TEST_CASE("as_tuple: the error code and the value come back as a tuple", "[asio][tokens]") {
    pair_fixture f;
    local_mr out = f.pool->allocate(16);
    local_mr in = f.pool->allocate_zeroed(16);
    put(out, "tuple");
    asio::io_context io;
    std::error_code recv_error = std::make_error_code(std::errc::io_error), misaligned;
    recv_result r;
    bool done = false;
    std::string failure;
    bool received = false;
    // as_tuple around a callback: the handler takes one std::tuple.
    async_recv(f.server, in.all(),
               tokens::as_tuple(asio::bind_executor(io, [&](std::tuple<std::error_code, recv_result> result) {
                   std::tie(recv_error, r) = result;
                   received = true;
               })));
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto [send_error] = co_await async_send(f.client, out.slice(0, 5), tokens::as_tuple(asio::use_awaitable));
        CHECK(!send_error);
        auto [ec, old] = co_await async_fetch_add(f.client, in.remote().slice(1, 8), 1,
                                                  tokens::as_tuple(asio::use_awaitable));
        misaligned = ec;  // a misaligned atomic: no exception, a code
        CHECK(old == 0);
        done = true;
    }, record_failure(failure));
    run_until(io, done, "the as_tuple coroutine", failure);
    run_until(io, received, "the as_tuple recv");
    CHECK(failure.empty());
    CHECK(!recv_error);
    CHECK(r.length == 5);
    CHECK(text_of(in, 5) == "tuple");
    CHECK(misaligned == std::errc::invalid_argument);
}

TEST_CASE("redirect_error: errors land in the error_code, a failed work completion included", "[asio][tokens][errors]") {
    pair_fixture f;
    local_mr target = f.pool->allocate_zeroed(4096);
    local_mr big = f.filled(4096, 7);
    asio::io_context io;
    std::error_code ok = std::make_error_code(std::errc::io_error), past_end, afterwards;
    bool done = false;
    std::string failure;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::error_code ec;
        co_await async_write(f.client, big.slice(0, 4096), target.remote(), asio::redirect_error(asio::use_awaitable, ec));
        ok = ec;
        // A hand-made slice far outside what the peer registered: the peer's
        // device refuses the write (a remote access error).
        remote_slice outside = target.remote();
        outside.address += std::uint64_t{1} << 40;
        co_await async_write(f.client, big.slice(0, 4096), outside, asio::redirect_error(asio::use_awaitable, ec));
        past_end = ec;
        // The connection is broken from then on.
        co_await async_write(f.client, big.slice(0, 4096), target.remote(), asio::redirect_error(asio::use_awaitable, ec));
        afterwards = ec;
        done = true;
    }, record_failure(failure));
    run_until(io, done, "the redirect_error coroutine", failure);
    CHECK(failure.empty());
    CHECK(!ok);
    CHECK(text_of(target, 4096) == std::string(4096, 7));
    CHECK(past_end == IBV_WC_REM_ACCESS_ERR);
    CHECK(afterwards == std::errc::not_connected);
}

TEST_CASE("async_accept and async_connect set up a connection; a peer that closed gives not_connected", "[asio][errors][connect]") {
    builder b;
    b.device(test::test_device_name());
    listener l = b.listen(test::test_address() + ":0");
    asio::io_context io;
    connection server, client;
    std::error_code accept_error = std::make_error_code(std::errc::io_error), connect_error = accept_error;
    bool accepted = false, connected = false;
    async_accept(l, asio::bind_executor(io, [&](std::error_code ec, connection c) {
        accept_error = ec;
        server = std::move(c);
        accepted = true;
    }));
    async_connect(b, l.address(), asio::bind_executor(io, [&](std::error_code ec, connection c) {
        connect_error = ec;
        client = std::move(c);
        connected = true;
    }));
    run_until(io, accepted, "the accept");
    REQUIRE(connected);
    REQUIRE(!accept_error);
    REQUIRE(!connect_error);

    // The pair moves bytes.
    auto pool = b.pool();
    local_mr out = pool->allocate(16);
    local_mr in = pool->allocate_zeroed(16);
    put(out, "over rdma_cm");
    io.restart();
    std::error_code recv_error = std::make_error_code(std::errc::io_error);
    recv_result first;
    bool received = false;
    async_recv(server, in.all(), asio::bind_executor(io, [&](std::error_code ec, recv_result r) {
        recv_error = ec;
        first = r;
        received = true;
    }));
    async_send(client, out.slice(0, 12), asio::bind_executor(io, [](std::error_code) {}));
    run_until(io, received, "the first message");
    CHECK(!recv_error);
    CHECK(first.length == 12);
    CHECK(text_of(in, 12) == "over rdma_cm");

    // The client closes: the server's pending recv fails, and so does a
    // send it starts afterwards.
    io.restart();
    std::error_code pending_recv = std::make_error_code(std::errc::io_error), close_error = pending_recv, later_send;
    bool closed = false, done = false;
    async_recv(server, in.all(), asio::bind_executor(io, [&](std::error_code ec, recv_result) {
        pending_recv = ec;
        async_send(server, in.all(), asio::bind_executor(io, [&](std::error_code ec2) {
            later_send = ec2;
            done = true;
        }));
    }));
    async_close(client, asio::bind_executor(io, [&](std::error_code ec) {
        close_error = ec;
        closed = true;
    }));
    run_until(io, done, "the server's recv and send after the client closed");
    CHECK(closed);
    CHECK(!close_error);
    // The disconnect moves the QP to error: the posted receive comes back
    // flushed (a work completion's code), later operations are refused.
    CHECK((pending_recv == IBV_WC_WR_FLUSH_ERR || pending_recv == std::errc::not_connected));
    CHECK(later_send == std::errc::not_connected);
}

TEST_CASE("recv || timer: the timer wins, the recv is cancelled, the connection goes on", "[asio][cancel]") {
    using namespace asio::experimental::awaitable_operators;
    pair_fixture f;
    local_mr out = f.pool->allocate(32);
    local_mr in = f.pool->allocate_zeroed(32);
    local_mr next = f.pool->allocate_zeroed(32);
    asio::io_context io;
    std::size_t first_winner = 9, second_winner = 9;
    recv_result late, won;
    bool done = false;
    std::string failure, stage = "start";
    std::error_code send_error = std::make_error_code(std::errc::io_error);
    auto started = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration took{};
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io, 100ms);
        auto which = co_await (async_recv(f.server, in.all(), asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
        took = std::chrono::steady_clock::now() - started;
        stage = "first || done";
        first_winner = which.index();
        // Documented: the cancelled recv's message goes to the next recv.
        put(out, "after the timer");
        co_await async_send(f.client, out.slice(0, 15), asio::use_awaitable);
        stage = "sent after the timer";
        late = co_await async_recv(f.server, next.all(), asio::use_awaitable);
        stage = "received after the timer";
        // And a recv that has its message before the timer wins.
        // The send waits (receiver not ready) until the recv below is posted.
        put(out, "before the timer");
        async_send(f.client, out.slice(0, 16), asio::bind_executor(io, [&](std::error_code ec) { send_error = ec; }));
        stage = "second ||";
        timer.expires_after(10s);
        auto again = co_await (async_recv(f.server, in.all(), asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
        second_winner = again.index();
        if (again.index() == 0)
            won = std::get<0>(again);
        done = true;
    }, record_failure(failure));
    run_until(io, done, "recv || timer", failure, stage);
    CHECK(failure.empty());
    CHECK(first_winner == 1);
    CHECK(took < 5s);
    CHECK(late.length == 15);
    CHECK(text_of(next, 15) == "after the timer");
    CHECK(second_winner == 0);
    CHECK(!send_error);
    CHECK(won.length == 16);
    CHECK(text_of(in, 16) == "before the timer");
}

TEST_CASE("a cancellation slot cancels with operation_aborted; total is not honoured", "[asio][cancel]") {
    pair_fixture f;
    local_mr out = f.pool->allocate(16);
    local_mr in = f.pool->allocate_zeroed(16);
    asio::io_context io;
    asio::cancellation_signal signal;
    std::error_code cancelled;
    bool cancelled_done = false;
    async_recv(f.server, in.all(),
               asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::error_code ec, recv_result) {
                   cancelled = ec;
                   cancelled_done = true;
               })));
    signal.emit(asio::cancellation_type::terminal);
    run_until(io, cancelled_done, "the cancelled recv");
    CHECK(cancelled == asio::error::operation_aborted);

    io.restart();
    asio::cancellation_signal total;
    std::error_code total_error = std::make_error_code(std::errc::io_error);
    recv_result got;
    bool total_done = false;
    async_recv(f.server, in.all(), asio::bind_cancellation_slot(total.slot(), asio::bind_executor(io, [&](std::error_code ec, recv_result r) {
                                                                    total_error = ec;
                                                                    got = r;
                                                                    total_done = true;
                                                                })));
    total.emit(asio::cancellation_type::total);
    put(out, "still here");
    sync_wait(f.client.send(out.slice(0, 10)));
    run_until(io, total_done, "the recv that ignored a total cancellation");
    // Whether the cancelled recv was posted or not, its message reaches
    // this one, whole.
    CHECK(!total_error);
    CHECK(got.length == 10);
    CHECK(text_of(in, 10) == "still here");
    io.restart();
    std::error_code partial_error;
    bool partial_done = false;
    asio::cancellation_signal partial;
    async_recv_imm(f.server, asio::bind_cancellation_slot(partial.slot(), asio::bind_executor(io, [&](std::error_code ec, recv_result) {
                                                              partial_error = ec;
                                                              partial_done = true;
                                                          })));
    partial.emit(asio::cancellation_type::partial);
    run_until(io, partial_done, "the recv_imm cancelled with partial");
    CHECK(partial_error == asio::error::operation_aborted);

    // If the recv_imm was posted before its cancellation, its receive stays
    // posted (an orphan) and keeps the connection alive until a message
    // lands in it: one immediate-only message (a recv_imm's receive has no
    // buffer), taken by one more recv_imm, leaves nothing posted, whichever
    // way the race went (LeakSanitizer checks).
    auto [last, sent] = sync_wait(when_all(f.server.recv_imm(), f.client.send_with_imm(out.slice(0, 0), 77)));
    (void)sent;
    CHECK(last.length == 0);
    CHECK(last.imm == std::optional<std::uint32_t>(77));
}

TEST_CASE("an agent call waiting for nothing is cancelled through its slot or its agent_call::stop", "[asio][cancel][agent]") {
    pair_fixture f;
    local_mr grant = f.pool->allocate_zeroed(64);
    local_mr out = f.filled(64, 0x33);
    asio::io_context io;
    asio::cancellation_signal signal;
    asio::steady_timer timer(io, 100ms);
    std::error_code by_slot, by_stop;
    bool slot_done = false, stop_done = false;
    async_receive_remote_mr(f.client, asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::error_code ec, remote_mr) {
                                                                       by_slot = ec;
                                                                       slot_done = true;
                                                                   })));
    timer.async_wait([&](std::error_code) { signal.emit(asio::cancellation_type::terminal); });
    run_until(io, slot_done, "receive_remote_mr cancelled through its slot");
    CHECK(by_slot == asio::error::operation_aborted);

    io.restart();
    std::stop_source stop;
    agent_call call;
    call.stop = stop.get_token();
    async_receive_remote_mr(f.client, call, asio::bind_executor(io, [&](std::error_code ec, remote_mr) {
                                by_stop = ec;
                                stop_done = true;
                            }));
    timer.expires_after(50ms);
    timer.async_wait([&](std::error_code) { stop.request_stop(); });
    run_until(io, stop_done, "receive_remote_mr cancelled through agent_call::stop");
    CHECK(by_stop == asio::error::operation_aborted);

    // The connection stays up: a grant sent now is the next one received,
    // and a write into it lands.
    io.restart();
    bool done = false;
    std::error_code grant_error, receive_error, write_error;
    std::string failure;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto [e1] = co_await async_send_local_mr(f.server, grant.all(), tokens::as_tuple(asio::use_awaitable));
        grant_error = e1;
        auto [e2, region] = co_await async_receive_remote_mr(f.client, tokens::as_tuple(asio::use_awaitable));
        receive_error = e2;
        auto [e3] = co_await async_write(f.client, out.all(), region.all(), tokens::as_tuple(asio::use_awaitable));
        write_error = e3;
        done = true;
    }, record_failure(failure));
    run_until(io, done, "a grant after the cancellations", failure);
    CHECK(failure.empty());
    CHECK(!grant_error);
    CHECK(!receive_error);
    CHECK(!write_error);
    CHECK(text_of(grant, 64) == std::string(64, 0x33));
}

TEST_CASE("agent calls as Asio operations: request, hand back, receive back", "[asio][agent]") {
    pair_fixture f;
    local_mr out = f.filled(128, 0x55);
    asio::io_context io;
    bool done = false;
    std::string failure;
    std::size_t region_size = 0;
    std::string returned;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        remote_mr region = co_await async_request_remote_mr(f.client, 128, asio::use_awaitable);
        region_size = region.all().size();
        co_await async_write(f.client, out.all(), region.all(), asio::use_awaitable);
        co_await async_send_remote_mr(f.client, std::move(region), asio::use_awaitable);
        local_mr back = co_await async_receive_local_mr(f.server, asio::use_awaitable);
        returned = text_of(back, 128);
        done = true;
    }, record_failure(failure));
    run_until(io, done, "the agent calls", failure);
    CHECK(failure.empty());
    CHECK(region_size == 128);
    CHECK(returned == std::string(128, 0x55));
}

TEST_CASE("handlers bound to a strand run on it, on the io_context's threads", "[asio][executor]") {
    pair_fixture f;
    local_mr source = f.filled(64, 0x11);
    local_mr target = f.pool->allocate_zeroed(64 * 16);
    asio::io_context io;
    auto strand = asio::make_strand(io);
    constexpr int writes = 16;
    int completed = 0, off_strand = 0, on_listener = 0;
    std::set<std::thread::id> handler_threads;
    for (int i = 0; i < writes; ++i)
        async_write(f.client, source.all(), target.remote().slice(static_cast<std::size_t>(i) * 64, 64),
                    asio::bind_executor(strand, [&](std::error_code ec) {
                        // The strand serialises these: no lock needed.
                        if (!strand.running_in_this_thread())
                            ++off_strand;
                        if (f.listener->running_in_this_thread())
                            ++on_listener;
                        handler_threads.insert(std::this_thread::get_id());
                        if (!ec)
                            ++completed;
                    }));
    std::set<std::thread::id> io_threads;
    std::mutex io_threads_mutex;
    auto run = [&] {
        {
            std::lock_guard lock(io_threads_mutex);
            io_threads.insert(std::this_thread::get_id());
        }
        io.run_for(30s);
    };
    std::thread second(run);
    run();
    second.join();
    REQUIRE(completed == writes);
    CHECK(off_strand == 0);
    CHECK(on_listener == 0);
    for (auto id : handler_threads)
        CHECK(io_threads.count(id) == 1);
    CHECK(text_of(target, 64 * 16) == std::string(64 * 16, 0x11));
}

TEST_CASE("async_run with a callable taking a stop token is cancellable by ||", "[asio][cancel][run]") {
    using namespace asio::experimental::awaitable_operators;
    pair_fixture f;
    local_mr in = f.pool->allocate_zeroed(16);
    local_mr next = f.pool->allocate_zeroed(16);
    local_mr out = f.pool->allocate(16);
    asio::io_context io;
    std::size_t winner = 9;
    recv_result late;
    bool done = false;
    std::string failure;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io, 50ms);
        auto which = co_await (async_run([&](std::stop_token stop) { return recv_task(f.server, in.all(), stop); },
                                         asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
        winner = which.index();
        put(out, "ran");
        // The receive is posted before the send starts (a send first could
        // exhaust its RNR retries on a slow host before the receive came).
        late = co_await (async_recv(f.server, next.all(), asio::use_awaitable) &&
                         async_send(f.client, out.slice(0, 3), asio::use_awaitable));
        done = true;
    }, record_failure(failure));
    run_until(io, done, "async_run || timer", failure);
    CHECK(failure.empty());
    CHECK(winner == 1);
    CHECK(late.length == 3);
    CHECK(text_of(next, 3) == "ran");
}

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
