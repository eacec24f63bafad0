// The group bootstraps without a device: the torchrun-style rendezvous with
// ranks as threads on 127.0.0.1 (the happy path, rank 0 late, a missing
// rank, garbage and truncated clients, mismatched world sizes and duplicate
// ranks), its wire format, group_options::from_hosts and from_environment
// (PMIx must not be found outside a launcher). PMIx itself is tested under
// mpirun (group_pmix, tests/support/pmix_exchange.cpp).

#include <array>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include <cordma/group.hpp>

#include "group/bootstrap/pmix_bootstrap.hpp"
#include "group/bootstrap/rendezvous_bootstrap.hpp"
#include "group/bootstrap/rendezvous_message.hpp"

using namespace cordma;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// A port nobody listens on right now (the kernel's pick, released again).
std::uint16_t free_port() {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
}

std::string endpoint_of(int rank) { return "10.0.0." + std::to_string(rank) + ":" + std::to_string(7000 + rank); }

std::future<std::vector<std::string>> start_rank(int rank, int world_size, std::uint16_t port,
                                                 clock_type::time_point deadline, std::string endpoint = {}) {
    if (endpoint.empty())
        endpoint = endpoint_of(rank);
    return std::async(std::launch::async, [=] {
        detail::rendezvous_bootstrap b(rank, world_size, host_port{"127.0.0.1", port});
        return b.exchange(endpoint, deadline);
    });
}

std::vector<std::string> expected_list(int n) {
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r)
        out.push_back(endpoint_of(r));
    return out;
}

// A raw client of rank 0's rendezvous; connects, retrying while it is not
// up yet, until `deadline`.
asio::ip::tcp::socket raw_client(asio::io_context& io, std::uint16_t port, clock_type::time_point deadline) {
    for (;;) {
        asio::ip::tcp::socket s(io);
        std::error_code ec;
        s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
        if (!ec)
            return s;
        if (clock_type::now() > deadline)
            FAIL("rank 0's rendezvous never came up: " << ec.message());
        std::this_thread::yield();
    }
}

// Reads until EOF: true when rank 0 closed the connection.
bool closed_by_peer(asio::ip::tcp::socket& s) {
    std::array<std::uint8_t, 256> sink{};
    std::error_code ec;
    while (!ec)
        s.read_some(asio::buffer(sink), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
}

// Sets or clears environment variables for one test, restoring them after.
class scoped_env {
public:
    scoped_env(std::initializer_list<std::pair<const char*, const char*>> vars) {
        for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CORDMA_GROUP_HOSTS",
                                 "CORDMA_GROUP_RANK", "CORDMA_GROUP_ADDRESS"})
            set(name, nullptr);
        for (auto [name, value] : vars)
            set(name, value);
    }
    ~scoped_env() {
        for (auto& [name, value] : saved_) {
            if (value)
                setenv(name.c_str(), value->c_str(), 1);
            else
                unsetenv(name.c_str());
        }
    }

private:
    void set(const char* name, const char* value) {
        if (!saved_.count(name)) {
            const char* old = std::getenv(name);
            saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
        }
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("rendezvous: four ranks all get the same full list", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 10s;
    std::vector<std::future<std::vector<std::string>>> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(start_rank(r, 4, port, deadline));
    for (auto& f : ranks)
        CHECK(f.get() == expected_list(4));
}

// Issue 32: a group's rank 0 takes a burst of clients as every server
// does. 64 ranks reach rank 0's rendezvous at once (the kernel's accept
// queue holds them all: max_listen_connections), and every rank gets the
// whole list.
TEST_CASE("rendezvous: 64 ranks reaching rank 0 at once all get the full list", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 60s;
    constexpr int world = 65;
    std::vector<std::future<std::vector<std::string>>> ranks;
    ranks.push_back(start_rank(0, world, port, deadline));
    for (int r = 1; r < world; ++r)
        ranks.push_back(start_rank(r, world, port, deadline));
    std::vector<std::string> expected = expected_list(world);
    int right = 0;
    for (auto& f : ranks)
        right += f.get() == expected ? 1 : 0;
    CHECK(right == world);
}

TEST_CASE("rendezvous: rank 0 started last; the others retry until it is up", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 10s;
    std::vector<std::future<std::vector<std::string>>> ranks;
    for (int r = 1; r < 4; ++r)
        ranks.push_back(start_rank(r, 4, port, deadline));
    // Not a wait for readiness: a deliberate head start, so that ranks 1..3
    // meet refused connects and go through their retries.
    std::this_thread::sleep_for(300ms);
    auto zero = start_rank(0, 4, port, deadline);
    CHECK(zero.get() == expected_list(4));
    for (auto& f : ranks)
        CHECK(f.get() == expected_list(4));
}

TEST_CASE("rendezvous: a missing rank is named by every rank, within the deadline", "[rendezvous]") {
    auto port = free_port();
    auto start = clock_type::now();
    auto deadline = start + 1500ms;
    std::vector<std::future<std::vector<std::string>>> ranks;
    for (int r : {0, 1, 3})
        ranks.push_back(start_rank(r, 4, port, deadline));
    for (auto& f : ranks) {
        try {
            f.get();
            FAIL("exchange returned without rank 2");
        } catch (const group_error& e) {
            INFO(e.what());
            CHECK(e.code() == std::errc::timed_out);
            CHECK(e.ranks() == std::vector<int>{2});
            CHECK_THAT(e.what(), Catch::Contains("rank 2 of 4") || Catch::Contains("never published: rank 2"));
        }
    }
    CHECK(clock_type::now() - start < 2500ms);
}

TEST_CASE("rendezvous: a rank that never reaches rank 0 names rank 0", "[rendezvous]") {
    auto port = free_port();
    auto start = clock_type::now();
    try {
        start_rank(1, 2, port, start + 1s).get();
        FAIL("exchange returned without rank 0");
    } catch (const group_error& e) {
        INFO(e.what());
        CHECK(e.code() == std::errc::timed_out);
        CHECK(e.ranks() == std::vector<int>{0});
        CHECK_THAT(e.what(), Catch::Contains("never accepted rank 1") && Catch::Contains("refused"));
    }
    CHECK(clock_type::now() - start < 2s);
}

TEST_CASE("rendezvous: garbage and truncated clients do not disturb the others", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 10s;
    auto zero = start_rank(0, 4, port, deadline);
    asio::io_context io;

    // Not cordma at all: closed at once, with a logged reason.
    auto garbage = raw_client(io, port, deadline);
    asio::write(garbage, asio::buffer(std::string("GET / HTTP/1.0\r\n\r\n")));
    CHECK(closed_by_peer(garbage));

    // A header that promises more than a publish can hold: closed before
    // rank 0 reads (or allocates) anything more.
    auto huge = raw_client(io, port, deadline);
    auto frame = detail::encode_rendezvous_publish({1, 4, endpoint_of(1)});
    auto inflated = frame;
    inflated[11] = 0x7f;  // length's high byte (little-endian)
    asio::write(huge, asio::buffer(inflated.data(), detail::rendezvous_header_size));
    CHECK(closed_by_peer(huge));

    // A publish cut short, left open: it holds no rank and blocks nobody.
    auto truncated = raw_client(io, port, deadline);
    asio::write(truncated, asio::buffer(frame.data(), frame.size() - 3));

    // A publish cut short, then closed.
    {
        auto cut = raw_client(io, port, deadline);
        asio::write(cut, asio::buffer(frame.data(), detail::rendezvous_header_size + 2));
    }

    std::vector<std::future<std::vector<std::string>>> ranks;
    for (int r = 1; r < 4; ++r)
        ranks.push_back(start_rank(r, 4, port, deadline));
    CHECK(zero.get() == expected_list(4));
    for (auto& f : ranks)
        CHECK(f.get() == expected_list(4));
    // Rank 0 is done: the half-sent client was closed too.
    CHECK(closed_by_peer(truncated));
}

TEST_CASE("rendezvous: another world size is refused with a clear error", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 10s;
    auto zero = start_rank(0, 2, port, deadline);
    try {
        start_rank(1, 3, port, deadline).get();
        FAIL("a rank with WORLD_SIZE=3 joined a rendezvous of 2");
    } catch (const group_error& e) {
        INFO(e.what());
        CHECK(e.code() == std::errc::invalid_argument);
        CHECK(e.ranks() == std::vector<int>{1});
        CHECK_THAT(e.what(), Catch::Contains("WORLD_SIZE=3") && Catch::Contains("rank 0 has WORLD_SIZE=2"));
    }
    // The right rank 1 still completes it.
    CHECK(start_rank(1, 2, port, deadline).get() == expected_list(2));
    CHECK(zero.get() == expected_list(2));
}

TEST_CASE("rendezvous: two processes claiming one rank: one is refused", "[rendezvous]") {
    auto port = free_port();
    auto deadline = clock_type::now() + 10s;
    auto zero = start_rank(0, 3, port, deadline);
    auto first = start_rank(1, 3, port, deadline, "10.0.0.1:7001");
    auto second = start_rank(1, 3, port, deadline, "10.0.0.9:7009");
    int refused = 0;
    std::vector<std::string> winner;
    for (auto* f : {&first, &second}) {
        // Whichever came second is refused at once; the other waits for rank 2.
        if (f->wait_for(3s) != std::future_status::ready)
            continue;
        try {
            f->get();
            FAIL("both processes with RANK=1 were taken");
        } catch (const group_error& e) {
            INFO(e.what());
            CHECK(e.code() == std::errc::invalid_argument);
            CHECK_THAT(e.what(), Catch::Contains("two processes have RANK=1"));
            ++refused;
        }
    }
    CHECK(refused == 1);
    auto two = start_rank(2, 3, port, deadline);
    auto list = zero.get();
    CHECK(two.get() == list);
    CHECK((list[1] == "10.0.0.1:7001" || list[1] == "10.0.0.9:7009"));
    auto& pending = first.valid() ? first : second;
    CHECK(pending.get() == list);
}

TEST_CASE("rendezvous: frames round-trip; every bad field is named", "[rendezvous][wire]") {
    auto frame = detail::encode_rendezvous_publish({3, 8, "10.1.2.3:7471"});
    auto header = detail::decode_rendezvous_header(std::span<const std::uint8_t, 12>(frame.data(), 12));
    CHECK(header.type == detail::rendezvous_type::publish);
    REQUIRE(header.length == frame.size() - 12);
    auto p = detail::decode_rendezvous_publish(std::span(frame).subspan(12));
    CHECK(p.rank == 3);
    CHECK(p.world_size == 8);
    CHECK(p.endpoint == "10.1.2.3:7471");

    auto bad_header = [&](std::size_t at, std::uint8_t value, const char* field) {
        auto copy = frame;
        copy[at] = value;
        CHECK_THROWS_WITH(detail::decode_rendezvous_header(std::span<const std::uint8_t, 12>(copy.data(), 12)),
                          Catch::Contains(std::string("'") + field + "'"));
    };
    bad_header(0, 'X', "magic");
    bad_header(4, 9, "version");
    bad_header(6, 7, "type");
    bad_header(7, 1, "reserved");
    bad_header(10, 0x10, "length");

    auto payload = std::vector<std::uint8_t>(frame.begin() + 12, frame.end());
    CHECK_THROWS_WITH(detail::decode_rendezvous_publish(std::span(payload).first(payload.size() - 1)),
                      Catch::Contains("'endpoint'") && Catch::Contains("cut short"));
    auto rank_too_big = payload;
    rank_too_big[0] = 8;  // the rank's low byte
    CHECK_THROWS_WITH(detail::decode_rendezvous_publish(rank_too_big), Catch::Contains("'rank'"));
    auto longer = payload;
    longer.push_back(0);
    CHECK_THROWS_WITH(detail::decode_rendezvous_publish(longer), Catch::Contains("more than its fields"));

    std::vector<std::string> endpoints{"a:1", "b:2", "[fe80::1]:3"};
    auto list = detail::encode_rendezvous_list(endpoints);
    CHECK(detail::decode_rendezvous_list(std::span(list).subspan(12)) == endpoints);
    std::vector<bool> status{true, false, true, true, false, false, false, false, true};
    auto s = detail::encode_rendezvous_status(status);
    CHECK(detail::decode_rendezvous_status(std::span(s).subspan(12)) == status);
    // Found by rendezvous_fuzz: the bits past world_size in the last byte
    // were ignored, though the encoder always writes them as zero.
    auto padded = std::vector<std::uint8_t>(s.begin() + 12, s.end());
    padded.back() |= 0x20;  // rank 13 of 9
    CHECK_THROWS_WITH(detail::decode_rendezvous_status(padded),
                      Catch::Contains("'published'") && Catch::Contains("past world_size 9"));
    auto r = detail::encode_rendezvous_refused("no");
    CHECK(detail::decode_rendezvous_refused(std::span(r).subspan(12)) == "no");
    CHECK_THROWS_AS(detail::encode_rendezvous_publish({0, 1, ""}), std::invalid_argument);
}

TEST_CASE("group_options::from_hosts validates its arguments", "[options]") {
    auto ok = group_options::from_hosts({"10.0.0.1:7000", "node2:7001", "[fe80::1]:7002"}, 2);
    CHECK(ok.rank == 2);
    CHECK(ok.hosts.size() == 3);
    CHECK(ok.bootstrap == nullptr);
    CHECK(ok.describe() == "host list (rank 2 of 3)");
    CHECK_THROWS_MATCHES(group_options::from_hosts({}, 0), std::invalid_argument,
                         Catch::Matchers::Predicate<std::invalid_argument>([](auto& e) {
                             return std::string(e.what()).find("'hosts' is empty") != std::string::npos;
                         }));
    CHECK_THROWS_WITH(group_options::from_hosts({"a:1", "b:2"}, 2), Catch::Contains("'rank' is 2, not in 0..1"));
    CHECK_THROWS_WITH(group_options::from_hosts({"a:1"}, -1), Catch::Contains("'rank' is -1"));
    CHECK_THROWS_WITH(group_options::from_hosts({"a:1", "nohost"}, 0),
                      Catch::Contains("'hosts', entry 1") && Catch::Contains("no port"));
    CHECK_THROWS_WITH(group_options::from_hosts({"a:99999"}, 0), Catch::Contains("1..65535"));
    CHECK_THAT(group_options{}.describe(), Catch::Contains("no endpoints"));
}

TEST_CASE("PMIx is not detected outside a launcher, and says why at once", "[options][pmix]") {
    auto start = clock_type::now();
    std::string why;
    auto pmix = detail::make_pmix_bootstrap(&why);
    CHECK(pmix == nullptr);
    CHECK(clock_type::now() - start < 2s);
    INFO(why);
    CHECK((why.find("PMIx_Init") != std::string::npos || why.find("built without PMIx") != std::string::npos));
}

TEST_CASE("group_options::from_environment: torchrun, host list, and what is missing", "[options]") {
    SECTION("nothing: says what each launcher needs") {
        scoped_env env({});
        try {
            group_options::from_environment();
            FAIL("from_environment found a launcher in an empty environment");
        } catch (const std::runtime_error& e) {
            INFO(e.what());
            CHECK_THAT(e.what(), Catch::Contains("no launcher found") && Catch::Contains("PMIx") &&
                                     Catch::Contains("RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT") &&
                                     Catch::Contains("CORDMA_GROUP_HOSTS"));
        }
    }
    SECTION("torchrun, partly") {
        scoped_env env({{"RANK", "1"}, {"WORLD_SIZE", "4"}});
        CHECK_THROWS_WITH(group_options::from_environment(),
                          Catch::Contains("RANK=1 and WORLD_SIZE=4 are set but MASTER_ADDR and MASTER_PORT are not"));
    }
    SECTION("torchrun, a port missing") {
        scoped_env env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}});
        CHECK_THROWS_WITH(group_options::from_environment(), Catch::Contains("but MASTER_PORT is not"));
    }
    SECTION("torchrun, a rank outside the world") {
        scoped_env env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
        CHECK_THROWS_WITH(group_options::from_environment(), Catch::Contains("RANK=4 is not in 0..3"));
    }
    SECTION("torchrun, not a number") {
        scoped_env env({{"RANK", "one"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
        CHECK_THROWS_WITH(group_options::from_environment(), Catch::Contains("RANK='one' is not a whole number"));
    }
    SECTION("torchrun, complete") {
        scoped_env env({{"RANK", "1"},
                        {"WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "10.0.0.1"},
                        {"MASTER_PORT", "29500"},
                        {"CORDMA_GROUP_ADDRESS", "10.0.0.2"}});
        auto o = group_options::from_environment();
        CHECK(o.rank == 1);
        REQUIRE(o.bootstrap != nullptr);
        CHECK(o.bootstrap->size() == 4);
        CHECK(o.hosts.empty());
        CHECK(o.listen_address == "10.0.0.2");
        CHECK_THAT(o.describe(), Catch::Contains("torchrun") && Catch::Contains("rank 1 of 4") &&
                                     Catch::Contains("10.0.0.1:29500"));
    }
    SECTION("host list") {
        scoped_env env({{"CORDMA_GROUP_HOSTS", "10.0.0.1:7000, 10.0.0.2:7000"}, {"CORDMA_GROUP_RANK", "1"}});
        auto o = group_options::from_environment();
        CHECK(o.rank == 1);
        CHECK(o.hosts == std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"});
        CHECK(o.bootstrap == nullptr);
        CHECK(o.describe() == "host list (rank 1 of 2)");
    }
    SECTION("host list without a rank, and a bad entry") {
        {
            scoped_env env({{"CORDMA_GROUP_HOSTS", "10.0.0.1:7000"}});
            CHECK_THROWS_WITH(group_options::from_environment(),
                              Catch::Contains("CORDMA_GROUP_HOSTS is set but CORDMA_GROUP_RANK is not"));
        }
        {
            scoped_env env({{"CORDMA_GROUP_RANK", "0"}});
            CHECK_THROWS_WITH(group_options::from_environment(),
                              Catch::Contains("CORDMA_GROUP_RANK=0 is set but CORDMA_GROUP_HOSTS"));
        }
        {
            scoped_env env({{"CORDMA_GROUP_HOSTS", "10.0.0.1:7000,10.0.0.2"}, {"CORDMA_GROUP_RANK", "0"}});
            CHECK_THROWS_WITH(group_options::from_environment(),
                              Catch::Contains("entry 1") && Catch::Contains("no port"));
        }
    }
    SECTION("a bad CORDMA_GROUP_ADDRESS") {
        scoped_env env({{"CORDMA_GROUP_HOSTS", "10.0.0.1:7000"},
                        {"CORDMA_GROUP_RANK", "0"},
                        {"CORDMA_GROUP_ADDRESS", "10.0.0.1:notaport"}});
        CHECK_THROWS_WITH(group_options::from_environment(), Catch::Contains("CORDMA_GROUP_ADDRESS"));
    }
}
