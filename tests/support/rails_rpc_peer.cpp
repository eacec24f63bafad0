// An rpc server and its clients over two rails (builder::rails, the devices
// in RXE_VM_RAIL_DEVICES or CORDMA_TEST_RAILS), for the faults suite's
// rails test (tests/faults/rails_guest.sh): calls run while rail 1's link
// goes down and comes back, and every call must be answered exactly once.
//
//   rails_rpc_peer serve ADDR:PORT
//       serves method 1 (the request with every byte plus one, so each
//       answer shows it came from its own request) until a client calls
//       method 2 with the number of calls its side made; answers that
//       call with the number this server handled, then exits: 0 if they
//       are equal.
//   rails_rpc_peer call ADDR:PORT [--clients N] [--seconds S] [--size B]
//                                 [--flap-at S --down CMD --up CMD]...
//       N clients (default 8), each making calls of B bytes (default
//       512 KiB: striped both ways) one after another for S seconds
//       (default 60); at each --flap-at second runs --down, and 10 s
//       later --up. Fails if a call fails or its answer is wrong, if the
//       server handled another number of calls than were made, or if at
//       the end (after waiting at most 60 s) a client's rail 1 is not up
//       on a new queue pair having carried reads since it came back.
//
// Prints the calls made, the longest, and each client's rails.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

using namespace cordma;
using clock_type = std::chrono::steady_clock;

namespace {

builder rails_builder() {
    const char* names = std::getenv("CORDMA_TEST_RAILS");
    if (names == nullptr)
        names = std::getenv("RXE_VM_RAIL_DEVICES");
    std::istringstream in(names != nullptr ? names : "");
    std::vector<std::string> devices;
    for (std::string name; in >> name;)
        devices.push_back(name);
    if (devices.size() < 2)
        throw std::runtime_error("rails_rpc_peer needs two devices: run under tools/rxe-vm --rails 2, or set "
                                 "CORDMA_TEST_RAILS");
    builder b;
    b.exchange(endpoint_exchange::tcp).rails(devices).connect_timeout(std::chrono::seconds(60));
    return b;
}

int serve(const std::string& address) {
    builder b = rails_builder();
    rpc::server server(b);
    std::atomic<std::uint64_t> handled{0};
    std::atomic<std::uint64_t> claimed{0};
    std::stop_source stop;
    server.handle(1, "plus one", [&](rpc::request r) -> task<std::vector<std::byte>> {
        handled.fetch_add(1);
        std::vector<std::byte> out(r.bytes().begin(), r.bytes().end());
        for (std::byte& x : out)
            x = static_cast<std::byte>(static_cast<unsigned>(x) + 1);
        co_return out;
    });
    server.handle(2, "done", [&](rpc::request r) -> task<std::vector<std::byte>> {
        std::uint64_t made = 0;
        std::memcpy(&made, r.bytes().data(), std::min(r.bytes().size(), sizeof made));
        claimed = made;
        std::uint64_t n = handled.load();
        std::vector<std::byte> out(sizeof n);
        std::memcpy(out.data(), &n, sizeof n);
        stop.request_stop();
        co_return out;
    });
    listener l = b.listen(address);
    std::printf("rails_rpc_peer serve: listening on %s\n", l.address().c_str());
    std::fflush(stdout);
    sync_wait(server.serve(l, stop.get_token()));
    std::printf("rails_rpc_peer serve: %llu calls handled, the clients made %llu\n",
                static_cast<unsigned long long>(handled.load()), static_cast<unsigned long long>(claimed.load()));
    return handled.load() == claimed.load() ? 0 : 1;
}

struct call_options {
    int clients = 8;
    int seconds = 60;
    std::size_t size = 512 << 10;
    std::vector<int> flap_at;
    std::string down, up;
};

std::byte pattern(std::uint64_t call, std::size_t i) { return static_cast<std::byte>((call * 31 + i * 7) & 0xff); }

int call(const std::string& address, const call_options& o) {
    builder b = rails_builder();
    std::vector<rpc::client> clients;
    for (int i = 0; i < o.clients; ++i)
        clients.push_back(sync_wait(rpc::client::connect(b, address)));
    std::vector<std::uint32_t> first_qp;
    for (auto& c : clients)
        first_qp.push_back(c.connection().rails().at(1).qp_num);

    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> made{0};
    std::atomic<long long> longest_ms{0};
    std::string failure;
    auto began = clock_type::now();
    std::thread faults([&] {
        // The fault schedule (not a wait for anything): rail 1 down at each
        // --flap-at second, up 10 s later; the calls end at --seconds.
        auto at = [&](int s) { std::this_thread::sleep_until(began + std::chrono::seconds(s)); };
        for (int s : o.flap_at) {
            at(s);
            std::printf("rails_rpc_peer call: %d s: %s\n", s, o.down.c_str());
            std::fflush(stdout);
            if (std::system(o.down.c_str()) != 0)
                std::printf("rails_rpc_peer call: FAILED: %s\n", o.down.c_str());
            at(s + 10);
            std::printf("rails_rpc_peer call: %d s: %s\n", s + 10, o.up.c_str());
            std::fflush(stdout);
            if (std::system(o.up.c_str()) != 0)
                std::printf("rails_rpc_peer call: FAILED: %s\n", o.up.c_str());
        }
        at(o.seconds);
        stop = true;
    });
    auto one_client = [&](rpc::client& c, int index) -> task<void> {
        std::vector<std::byte> request(o.size);
        for (std::uint64_t k = 0; !stop.load(); ++k) {
            std::uint64_t id = static_cast<std::uint64_t>(index) << 32 | k;
            for (std::size_t i = 0; i < request.size(); ++i)
                request[i] = pattern(id, i);
            auto t0 = clock_type::now();
            std::vector<std::byte> answer = co_await c.call(1, request);
            long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
            long long seen = longest_ms.load();
            while (ms > seen && !longest_ms.compare_exchange_weak(seen, ms)) {
            }
            made.fetch_add(1);
            if (answer.size() != request.size())
                throw std::runtime_error("client " + std::to_string(index) + " call " + std::to_string(k) + ": " +
                                         std::to_string(answer.size()) + " bytes answered to " +
                                         std::to_string(request.size()));
            for (std::size_t i = 0; i < answer.size(); ++i)
                if (answer[i] != static_cast<std::byte>(static_cast<unsigned>(pattern(id, i)) + 1))
                    throw std::runtime_error("client " + std::to_string(index) + " call " + std::to_string(k) +
                                             ": byte " + std::to_string(i) + " of the answer is wrong");
        }
    };
    try {
        sync_wait([&]() -> task<void> {
            task_group g;
            for (int i = 0; i < o.clients; ++i)
                g.spawn(one_client(clients[static_cast<std::size_t>(i)], i));
            co_await g.join();
        }());
    } catch (const std::exception& e) {
        failure = e.what();
        stop = true;
    }
    faults.join();
    std::printf("rails_rpc_peer call: %llu calls of %zu bytes by %d clients in %d s, the longest %lld ms\n",
                static_cast<unsigned long long>(made.load()), o.size, o.clients, o.seconds, longest_ms.load());
    int rc = 0;
    if (!failure.empty()) {
        std::printf("rails_rpc_peer call: FAILED: %s\n", failure.c_str());
        rc = 1;
    }

    // Every client's rail 1 back (on a new QP) and carrying reads again.
    if (!o.flap_at.empty()) {
        auto t0 = clock_type::now();
        auto all_back = [&] {
            for (std::size_t i = 0; i < clients.size(); ++i) {
                rail_info r = clients[i].connection().rails().at(1);
                if (!r.up || r.qp_num == first_qp[i])
                    return false;
            }
            return true;
        };
        while (!all_back() && clock_type::now() - t0 < std::chrono::seconds(60))
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        // A call per client after they are back: its response read striped.
        std::vector<std::byte> request(o.size, std::byte{1});
        for (auto& c : clients) {
            try {
                c.call_sync(1, request);
                made.fetch_add(1);
            } catch (const std::exception& e) {
                std::printf("rails_rpc_peer call: FAILED: a call after the rail came back: %s\n", e.what());
                rc = 1;
            }
        }
        for (std::size_t i = 0; i < clients.size(); ++i) {
            rail_info r = clients[i].connection().rails().at(1);
            std::printf("rails_rpc_peer call: client %zu rail %s QP %u (was %u) %s: reads %llu (%llu B) since it "
                        "came back\n",
                        i, r.device.c_str(), r.qp_num, first_qp[i], r.up ? "up" : "DOWN",
                        static_cast<unsigned long long>(r.counters[operation_kind::read].completed),
                        static_cast<unsigned long long>(r.counters[operation_kind::read].bytes));
            if (!r.up || r.qp_num == first_qp[i] || r.counters[operation_kind::read].completed == 0) {
                std::printf("rails_rpc_peer call: FAILED: client %zu's rail 1 is not back carrying reads\n", i);
                rc = 1;
            }
        }
    }

    // The server counts what it handled: exactly the calls made.
    std::uint64_t total = made.load();
    std::vector<std::byte> claim(sizeof total);
    std::memcpy(claim.data(), &total, sizeof total);
    std::vector<std::byte> answer = clients.front().call_sync(2, claim);
    std::uint64_t handled = 0;
    std::memcpy(&handled, answer.data(), std::min(answer.size(), sizeof handled));
    std::printf("rails_rpc_peer call: the server handled %llu calls, %llu were made\n",
                static_cast<unsigned long long>(handled), static_cast<unsigned long long>(total));
    if (handled != total) {
        std::printf("rails_rpc_peer call: FAILED: the server handled %llu calls, not %llu\n",
                    static_cast<unsigned long long>(handled), static_cast<unsigned long long>(total));
        rc = 1;
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 3) {
        std::fprintf(stderr, "usage: rails_rpc_peer serve|call ADDR:PORT [options] (see the source's header)\n");
        return 2;
    }
    std::string mode = argv[1];
    std::string address = argv[2];
    call_options o;
    for (int i = 3; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::invalid_argument(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--clients")
            o.clients = std::atoi(value().c_str());
        else if (arg == "--seconds")
            o.seconds = std::atoi(value().c_str());
        else if (arg == "--size")
            o.size = std::strtoull(value().c_str(), nullptr, 0);
        else if (arg == "--flap-at")
            o.flap_at.push_back(std::atoi(value().c_str()));
        else if (arg == "--down")
            o.down = value();
        else if (arg == "--up")
            o.up = value();
        else
            throw std::invalid_argument("unknown option " + arg);
    }
    if (o.clients < 1 || o.seconds < 1 || o.size == 0)
        throw std::invalid_argument("--clients, --seconds and --size must be positive");
    if (!o.flap_at.empty() && (o.down.empty() || o.up.empty()))
        throw std::invalid_argument("--flap-at needs --down and --up");
    if (mode == "serve")
        return serve(address);
    if (mode == "call")
        return call(address, o);
    std::fprintf(stderr, "rails_rpc_peer: unknown mode '%s'\n", mode.c_str());
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "rails_rpc_peer %s: FAILED: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 1;
}
