// The torchrun-style bootstrap: rank 0 serves (rendezvous_server.cpp), the
// others join here: connect (retrying while rank 0 is not up), publish,
// read status frames until the list or a refusal comes.
#include "group/bootstrap/rendezvous_bootstrap.hpp"

#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <cordma/group.hpp>

#include "group/bootstrap/rendezvous_message.hpp"
#include "group/bootstrap/rendezvous_server.hpp"

namespace cordma::detail {

namespace {

using asio::ip::tcp;
using clock = std::chrono::steady_clock;

// Connect retries while rank 0 is not listening yet: quick at first (the
// ranks usually start within milliseconds of each other), then gentle.
constexpr std::chrono::milliseconds first_retry{10};
constexpr std::chrono::milliseconds last_retry{250};

std::string rank_names(const std::vector<int>& ranks) {
    std::string out;
    for (int r : ranks)
        out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
}

// One join: what it learnt, for the result or the timeout's message.
struct joiner {
    asio::io_context io;
    tcp::endpoint master;
    std::vector<std::uint8_t> publish;
    std::string where;
    int rank = 0;
    int world_size = 0;

    std::optional<std::vector<std::string>> list;
    std::optional<group_error> refused;
    std::optional<std::vector<bool>> status;
    std::string last_failure;
    bool reached = false;
    std::exception_ptr crash;

    // The next frame from rank 0; nullopt (with last_failure set) when the
    // connection ended or rank 0 sent something that is not a frame.
    asio::awaitable<std::optional<std::pair<rendezvous_type, std::vector<std::uint8_t>>>> read_frame(
        tcp::socket& socket) {
        std::error_code ec;
        std::array<std::uint8_t, rendezvous_header_size> head{};
        co_await asio::async_read(socket, asio::buffer(head), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            last_failure = "rank 0 closed the connection before sending the list (" + ec.message() + ")";
            co_return std::nullopt;
        }
        try {
            rendezvous_header header = decode_rendezvous_header(head);
            std::vector<std::uint8_t> payload(header.length);
            co_await asio::async_read(socket, asio::buffer(payload), asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                last_failure = "rank 0's connection ended inside a frame (" + ec.message() + ")";
                co_return std::nullopt;
            }
            co_return std::make_pair(header.type, std::move(payload));
        } catch (const std::invalid_argument& e) {
            last_failure = std::string("rank 0 sent garbage: ") + e.what();
            co_return std::nullopt;
        }
    }

    // Talks to rank 0 over one connection: true when done (list or refusal).
    asio::awaitable<bool> attempt(tcp::socket& socket) {
        std::error_code ec;
        co_await socket.async_connect(master, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            last_failure = "connect: " + ec.message();
            co_return false;
        }
        reached = true;
        co_await asio::async_write(socket, asio::buffer(publish), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            last_failure = "sending the publish: " + ec.message();
            co_return false;
        }
        for (;;) {
            auto frame = co_await read_frame(socket);
            if (!frame)
                co_return false;
            try {
                switch (frame->first) {
                case rendezvous_type::status: status = decode_rendezvous_status(frame->second); break;
                case rendezvous_type::list: {
                    auto got = decode_rendezvous_list(frame->second);
                    if (got.size() != static_cast<std::size_t>(world_size))
                        throw std::invalid_argument("the list has " + std::to_string(got.size()) +
                                                    " endpoints, WORLD_SIZE is " + std::to_string(world_size));
                    list = std::move(got);
                    co_return true;
                }
                case rendezvous_type::refused:
                    refused.emplace(std::errc::invalid_argument,
                                    "torchrun rendezvous (" + where + "): rank 0 refused rank " +
                                        std::to_string(rank) + ": " + decode_rendezvous_refused(frame->second),
                                    std::vector<int>{rank});
                    co_return true;
                case rendezvous_type::publish:
                    throw std::invalid_argument("rank 0 sent a publish frame");
                }
            } catch (const std::invalid_argument& e) {
                last_failure = std::string("rank 0 sent garbage: ") + e.what();
                co_return false;
            }
        }
    }

    asio::awaitable<void> run() {
        asio::steady_timer retry(io);
        auto wait = first_retry;
        for (;;) {
            tcp::socket socket(io);
            bool done = co_await attempt(socket);
            if (done) {
                io.stop();
                co_return;
            }
            std::error_code ignored;
            socket.close(ignored);
            retry.expires_after(wait);
            co_await retry.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
            wait = std::min(wait * 2, last_retry);
        }
    }
};

}  // namespace

rendezvous_bootstrap::rendezvous_bootstrap(int rank, int world_size, host_port master)
    : rank_(rank), world_size_(world_size), master_(std::move(master)) {
    if (world_size < 1 || static_cast<std::uint32_t>(world_size) > rendezvous_max_world_size)
        throw std::invalid_argument("torchrun rendezvous: WORLD_SIZE=" + std::to_string(world_size) +
                                    " is not in 1.." + std::to_string(rendezvous_max_world_size));
    if (rank < 0 || rank >= world_size)
        throw std::invalid_argument("torchrun rendezvous: RANK=" + std::to_string(rank) + " is not in 0.." +
                                    std::to_string(world_size - 1) + " (WORLD_SIZE=" + std::to_string(world_size) +
                                    ")");
}

std::string rendezvous_bootstrap::where() const {
    bool v6 = master_.host.find(':') != std::string::npos;
    return "MASTER_ADDR:MASTER_PORT " + (v6 ? "[" + master_.host + "]" : master_.host) + ":" +
           std::to_string(master_.port);
}

std::string rendezvous_bootstrap::describe() const {
    return "torchrun environment (rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + ", " +
           (rank_ == 0 ? "serving" : "joining") + " the rendezvous at " + where() + ")";
}

std::vector<std::string> rendezvous_bootstrap::exchange(const std::string& endpoint, clock::time_point deadline) {
    // Rank 0 puts its own endpoint on no wire, but it must obey the same
    // rules as everyone's (1..255 printable characters): check it here.
    encode_rendezvous_publish({static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(world_size_),
                               endpoint});
    if (rank_ == 0)
        return serve_rendezvous(master_, world_size_, endpoint, deadline, where());
    return join(endpoint, deadline);
}

std::vector<std::string> rendezvous_bootstrap::join(const std::string& endpoint, clock::time_point deadline) {
    auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    joiner j;
    j.publish = encode_rendezvous_publish({static_cast<std::uint32_t>(rank_),
                                           static_cast<std::uint32_t>(world_size_), endpoint});
    j.where = where();
    j.rank = rank_;
    j.world_size = world_size_;
    socket_address resolved = resolve(master_);  // blocking getaddrinfo; we are on our own thread
    std::memcpy(j.master.data(), resolved.get(), resolved.length);
    j.master.resize(resolved.length);
    asio::co_spawn(j.io, j.run(), [&j](std::exception_ptr e) {
        if (e) {
            j.crash = e;
            j.io.stop();
        }
    });
    j.io.run_until(deadline);
    if (j.crash)
        std::rethrow_exception(j.crash);
    if (j.refused)
        throw *j.refused;
    if (j.list)
        return *j.list;
    std::string within = " within " + std::to_string(limit.count()) + " ms";
    if (!j.reached)
        throw group_error(std::errc::timed_out,
                          "torchrun rendezvous: rank 0 (" + j.where + ") never accepted rank " +
                              std::to_string(rank_) + within + " (last attempt: " + j.last_failure +
                              "): is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same for every rank?",
                          {0});
    std::vector<int> missing;
    if (j.status)
        for (int r = 0; r < world_size_; ++r)
            if (!(*j.status)[r])
                missing.push_back(r);
    if (missing.empty())
        throw group_error(std::errc::timed_out,
                          "torchrun rendezvous (" + j.where + "): rank 0 sent no list" + within +
                              (j.last_failure.empty() ? "" : " (last: " + j.last_failure + ")"),
                          {0});
    std::string message = "torchrun rendezvous (" + j.where + "): rank" + (missing.size() > 1 ? "s " : " ") +
                          rank_names(missing) + " of " + std::to_string(world_size_) + " had not published " +
                          (missing.size() > 1 ? "their endpoints" : "its endpoint") + within +
                          " (as of rank 0's last status, sent at most 500 ms before)";
    throw group_error(std::errc::timed_out, std::move(message), std::move(missing));
}

}  // namespace cordma::detail
