// metrics_endpoint (unit: no device): the endpoint's addresses, the pages
// and statuses it answers with, and what it refuses, over a Unix socket
// and loopback TCP. With no event listener in this process the pages are
// the empty process's; tests/metrics_stat_test.cpp serves a live one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include <catch2/catch.hpp>

#include <cordma/metrics_endpoint.hpp>

#include "support/http_client.hpp"

using cordma::metrics_endpoint;
using cordma::test::connect_endpoint;
using cordma::test::http_exchange;

namespace {

std::string temp_path(const char* name) {
    return "/tmp/cordma-endpoint-" + std::to_string(getpid()) + "-" + name + ".sock";
}

std::string get(const std::string& address, const std::string& path) {
    return http_exchange(address, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

std::string status(const std::string& answer) { return answer.substr(0, answer.find("\r\n")); }
std::string body(const std::string& answer) { return answer.substr(answer.find("\r\n\r\n") + 4); }

bool exists(const std::string& path) {
    struct stat st{};
    return stat(path.c_str(), &st) == 0;
}

std::string refusal(const std::string& where) {
    try {
        metrics_endpoint e(where);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    FAIL("metrics_endpoint(\"" << where << "\") was not refused");
    return {};
}

}  // namespace

TEST_CASE("the endpoint serves the pages over a Unix socket and removes it after", "[metrics_endpoint]") {
    std::string path = temp_path("pages");
    {
        metrics_endpoint e("unix:" + path);
        CHECK(e.address() == "unix:" + path);
        CHECK(exists(path));

        std::string page = get(e.address(), "/metrics");
        CHECK(status(page) == "HTTP/1.0 200 OK");
        CHECK(page.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
        std::string text = body(page);
        CHECK(page.find("Content-Length: " + std::to_string(text.size()) + "\r\n") != std::string::npos);
        // The empty process: no queue pair, every total there and zero.
        CHECK(text.find("\ncordma_queue_pairs 0\n") != std::string::npos);
        CHECK(text.find("cordma_operations_completed_total{kind=\"write\"} 0\n") != std::string::npos);
        CHECK(text.find("# TYPE cordma_queue_pairs_opened_total counter\n") != std::string::npos);

        std::string json = get(e.address(), "/metrics.json");
        CHECK(status(json) == "HTTP/1.0 200 OK");
        CHECK(json.find("Content-Type: application/json\r\n") != std::string::npos);
        CHECK(body(json).front() == '{');
        CHECK(body(json).find("\"connections\"") != std::string::npos);

        // HEAD: the headers alone.
        std::string head = http_exchange(e.address(), "HEAD /metrics HTTP/1.0\r\n\r\n");
        CHECK(status(head) == "HTTP/1.0 200 OK");
        CHECK(body(head).empty());

        CHECK(status(get(e.address(), "/nothing")) == "HTTP/1.0 404 Not Found");
        CHECK(body(get(e.address(), "/nothing")).find("/metrics, /metrics.json, /stuck") != std::string::npos);
        CHECK(status(http_exchange(e.address(), "POST /metrics HTTP/1.0\r\n\r\n")) == "HTTP/1.0 405 Method Not Allowed");
        CHECK(status(http_exchange(e.address(), "hello\n\n")) == "HTTP/1.0 400 Bad Request");
        CHECK(e.requests() == 7);
    }
    CHECK_FALSE(exists(path));
}

TEST_CASE("the endpoint takes a free loopback port and names it", "[metrics_endpoint]") {
    metrics_endpoint e("127.0.0.1:0");
    REQUIRE(e.address().rfind("127.0.0.1:", 0) == 0);
    int port = std::stoi(e.address().substr(10));
    CHECK(port > 0);
    CHECK(status(get(e.address(), "/metrics?connections=1&peer_hosts=0")) == "HTTP/1.0 200 OK");
    metrics_endpoint named("localhost:0");
    CHECK(named.address().rfind("127.0.0.1:", 0) == 0);
    CHECK(named.address() != e.address());
}

TEST_CASE("a client that says nothing does not hold the endpoint", "[metrics_endpoint]") {
    metrics_endpoint e("unix:" + temp_path("silent"));
    int silent = connect_endpoint(e.address());
    auto start = std::chrono::steady_clock::now();
    CHECK(status(get(e.address(), "/metrics")) == "HTTP/1.0 200 OK");
    // Answered once the silent one's 2 s ran out, not never.
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    close(silent);
}

TEST_CASE("a client that trickles its request does not hold the endpoint", "[metrics_endpoint]") {
    metrics_endpoint e("unix:" + temp_path("trickle"));
    int trickler = connect_endpoint(e.address());
    // A byte of a request that never ends every 100 ms, for up to 20 s.
    // Each request has one deadline (2 s), so the endpoint answers it
    // (a bad request) and closes it long before; when every byte bought
    // 2 s more, this client held the endpoint (and its destructor) for
    // as long as it went on.
    bool answered = false;
    int sent = 0;
    std::thread trickle([&] {
        for (; sent < 200; ++sent) {
            pollfd p{trickler, POLLIN, 0};
            if (poll(&p, 1, 100) > 0) {
                answered = true;
                return;
            }
            if (send(trickler, "G", 1, MSG_NOSIGNAL) != 1)
                return;
        }
    });
    CHECK(status(get(e.address(), "/metrics")) == "HTTP/1.0 200 OK");
    trickle.join();
    CHECK(answered);
    INFO("bytes trickled before the endpoint answered: " << sent);
    CHECK(sent < 200);
    close(trickler);
}

TEST_CASE("the endpoint refuses what it cannot serve, by name", "[metrics_endpoint]") {
    CHECK_THAT(refusal("10.0.0.1:9464"), Catch::Contains("10.0.0.1 is not a loopback address"));
    CHECK_THAT(refusal("0.0.0.0:9464"), Catch::Contains("not a loopback address"));
    CHECK_THAT(refusal("[2001:db8::1]:9464"), Catch::Contains("[2001:db8::1] is not a loopback address"));
    CHECK_THAT(refusal("127.0.0.1:99999"), Catch::Contains("the port \"99999\" is not a number from 0 to 65535"));
    CHECK_THAT(refusal("metrics"), Catch::Contains("expected \"unix:/path\""));
    CHECK_THAT(refusal("example.com:80"), Catch::Contains("\"example.com\" is not an address"));
    CHECK_THAT(refusal("unix:"), Catch::Contains("no path after \"unix:\""));
    CHECK_THAT(refusal("unix:/tmp/" + std::string(200, 'x')), Catch::Contains("a Unix socket path of"));

    // A socket another endpoint serves is kept; one left by a process gone
    // (nobody answering) is replaced.
    std::string path = temp_path("taken");
    metrics_endpoint first("unix:" + path);
    try {
        metrics_endpoint second(path);
        FAIL("a second endpoint took " << path);
    } catch (const std::system_error& e) {
        CHECK_THAT(e.what(), Catch::Contains(path + " is served already"));
    }
    // The abstract namespace: served, and taken once only.
    std::string abstract = "unix:@cordma-endpoint-" + std::to_string(getpid());
    metrics_endpoint named(abstract);
    CHECK(named.address() == abstract);
    try {
        metrics_endpoint again(abstract);
        FAIL("a second endpoint took " << abstract);
    } catch (const std::system_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("served already"));
    }
    std::string stale = temp_path("stale");
    {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, stale.c_str(), stale.size() + 1);
        REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
        close(fd);  // the file stays, nobody listening
    }
    REQUIRE(exists(stale));
    metrics_endpoint replaced(stale);
    CHECK(status(get(replaced.address(), "/metrics")) == "HTTP/1.0 200 OK");
    CHECK(status(get(named.address(), "/metrics")) == "HTTP/1.0 200 OK");
}
