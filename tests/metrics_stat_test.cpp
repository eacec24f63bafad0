// cordma-stat on a live rpc server with 16 clients (issue 34): the
// process's metrics endpoint, started by CORDMA_METRICS (tests/meson.build
// sets it for this test) and by a builder's setting, serves every queue
// pair of the process and the server's methods; cordma-stat's view of it
// shows the 32 queue pairs, the calls per second while they run, and the
// exact counts after; promtool accepts the page, Python parses the JSON.
// The view is printed, a real capture (the README's comes from here).
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/builder.hpp>
#include <cordma/listener.hpp>
#include <cordma/metrics.hpp>
#include <cordma/rpc.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

#include "support/http_client.hpp"
#include "support/rxe_device.hpp"

using namespace cordma;
using namespace std::chrono_literals;
using test::any_port;
using test::test_builder;

namespace {

// `command`'s exit status and output (stdout and stderr), with `input`
// on its standard input when given.
std::pair<int, std::string> run(const std::string& command, const std::string& input = {}) {
    std::string line = command + " 2>&1";
    std::string path;
    if (!input.empty()) {
        char tmp[] = "/tmp/cordma-stat-XXXXXX";
        int fd = mkstemp(tmp);
        REQUIRE(fd >= 0);
        REQUIRE(write(fd, input.data(), input.size()) == static_cast<ssize_t>(input.size()));
        close(fd);
        path = tmp;
        line += std::string(" < ") + tmp;
    }
    FILE* p = popen(line.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string output;
    char buf[1024];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
        output.append(buf, n);
    int status = pclose(p);
    if (!path.empty())
        unlink(path.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string stat_program() {
    const char* p = std::getenv("CORDMA_STAT");
    REQUIRE(p != nullptr);  // tests/meson.build sets it
    return p;
}

// The numbers on the line of `text` that starts with `prefix` (after it).
std::vector<double> numbers_after(const std::string& text, const std::string& prefix) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind(prefix, 0) != 0)
            continue;
        std::istringstream in(line.substr(prefix.size()));
        std::vector<double> out;
        double v;
        while (in >> v)
            out.push_back(v);
        return out;
    }
    FAIL("no line starts with \"" << prefix << "\" in:\n" << text);
    return {};
}

// The sample `series` (name and labels, exactly as rendered) of a page.
double sample_of(const std::string& page, const std::string& series) {
    std::size_t at = page.find("\n" + series + " ");
    REQUIRE(at != std::string::npos);
    return std::stod(page.substr(at + series.size() + 2));
}

task<void> calls_until(rpc::client* c, const std::atomic<bool>* stop, std::uint64_t* made) {
    std::vector<std::byte> request(64, std::byte{7});
    while (!stop->load(std::memory_order_relaxed)) {
        std::vector<std::byte> answer = co_await c->call(1, request);
        if (answer == request)
            ++*made;
    }
}

task<void> all_calls(std::vector<rpc::client>* clients, const std::atomic<bool>* stop, std::vector<std::uint64_t>* made) {
    task_group g;
    for (std::size_t i = 0; i < clients->size(); ++i)
        g.spawn(calls_until(&(*clients)[i], stop, &(*made)[i]));
    co_await g.join();
}

}  // namespace

TEST_CASE("cordma-stat shows a live rpc server with 16 clients", "[metrics][stat]") {
    // Abstract sockets: no file (tools/rxe-vm shares the host's /tmp
    // through 9p, which makes no socket).
    const std::string socket = "@cordma-stat-test-" + std::to_string(getpid());
    builder sb = test_builder();
    sb.metrics_endpoint("unix:" + socket).connect_timeout(60s);
    rpc::server server(sb);
    server.handle(1, "echo", [](rpc::request r) -> task<std::vector<std::byte>> {
        co_return std::vector<std::byte>(r.bytes().begin(), r.bytes().end());
    });
    listener l = sb.listen(any_port());
    std::stop_source stop_serving;
    std::thread serving([&] { sync_wait(server.serve(l, stop_serving.get_token())); });

    builder cb = test_builder();
    cb.connect_timeout(60s);
    std::vector<rpc::client> clients;
    for (int i = 0; i < 16; ++i)
        clients.push_back(sync_wait(rpc::client::connect(cb, l.address())));

    // Calls running while cordma-stat looks.
    std::atomic<bool> stop_calls{false};
    std::vector<std::uint64_t> made(clients.size(), 0);
    std::thread calling([&] { sync_wait(all_calls(&clients, &stop_calls, &made)); });
    auto [rc, live] = run(stat_program() + " -n 1 -i 0.5 --plain -q 40 unix:" + socket);
    stop_calls = true;
    calling.join();
    std::printf("cordma-stat while 16 clients call:\n%s\n", live.c_str());
    REQUIRE(rc == 0);
    // Both ends in this process: 16 client and 16 server queue pairs.
    CHECK(live.find("queue pairs: 32 live (0 broken), 32 opened, 0 closed") != std::string::npos);
    CHECK(live.find("disconnects: closed_here 0, failed_completion 0, other 0, peer_closed 0\n") != std::string::npos);
    std::vector<double> echo = numbers_after(live, "1      echo ");
    REQUIRE(echo.size() == 8);
    CHECK(echo[0] > 0);  // calls per second while they ran
    CHECK(echo[6] > 0);  // p50 us
    CHECK(echo[7] >= echo[6]);  // p99 us
    CHECK(live.find("queue pairs, busiest 32 of 32:") != std::string::npos);
    std::size_t up = 0;
    for (std::size_t at = live.find(" up\n"); at != std::string::npos; at = live.find(" up\n", at + 1))
        ++up;
    CHECK(up == 32);

    // Once they stopped: exact counts.
    std::uint64_t total = 0;
    for (std::uint64_t n : made) {
        CHECK(n > 0);  // every client's calls got through
        total += n;
    }
    auto [rc2, after] = run(stat_program() + " -n 1 -i 0.1 --plain -q 0 unix:" + socket);
    std::printf("cordma-stat after the calls:\n%s\n", after.c_str());
    REQUIRE(rc2 == 0);
    echo = numbers_after(after, "1      echo ");
    REQUIRE(echo.size() == 8);
    CHECK(echo[0] == 0);                             // calls/s: none now
    CHECK(echo[1] == static_cast<double>(total));  // calls
    CHECK(echo[2] == static_cast<double>(total));  // answered
    CHECK(echo[3] == 0);                             // failed
    CHECK(echo[5] == 0);                             // in flight
    CHECK(after.find("queue pairs, busiest") == std::string::npos);  // -q 0
    // The server's shared receive queue: its 16 clients attached, every
    // request delivered through it (and the clients' credit returns), none
    // failed, every receive posted again once its call was read.
    std::size_t srq_at = after.find("\nshared rq ");
    REQUIRE(srq_at != std::string::npos);
    std::size_t row = after.find('\n', srq_at + 1) + 1;
    std::size_t name_end = after.find(' ', row);
    std::vector<double> srq = numbers_after(after, after.substr(row, name_end - row));
    REQUIRE(srq.size() == 7);  // size, connections, ready, fewest, msgs/s, messages, failed
    CHECK(srq[1] == 16);
    CHECK(srq[2] == srq[0]);
    CHECK(srq[3] <= srq[0]);
    CHECK(srq[5] >= static_cast<double>(total));
    CHECK(srq[6] == 0);
    // The device's own counters, from the page: its packets, at least one
    // per call each way.
    std::vector<double> device = numbers_after(after, "device " + test::test_device_name() + " port 1: packets/s sent ");
    REQUIRE_FALSE(device.empty());  // the rate, 0 now

    // The environment's endpoint (CORDMA_METRICS, started with this
    // process's first event listener) serves the same process.
    const char* env = std::getenv("CORDMA_METRICS");
    REQUIRE(env != nullptr);
    std::string env_address = env;
    env_address.replace(env_address.find("%p"), 2, std::to_string(getpid()));
    std::string page = test::http_get_ok(env_address, "/metrics");
    CHECK(sample_of(page, "cordma_rpc_calls_total{server=\"1\",method=\"echo\"}") == static_cast<double>(total));
    CHECK(sample_of(page, "cordma_queue_pairs") == 32);
    // The clients' side, summed over the 16: every call made and answered.
    CHECK(sample_of(page, "cordma_rpc_client_calls_total") == static_cast<double>(total));
    CHECK(sample_of(page, "cordma_rpc_client_answered_total") == static_cast<double>(total));
    CHECK(sample_of(page, "cordma_rpc_client_errors_total{error=\"timed_out\"}") == 0);
    // Every answered call timed, on both sides.
    CHECK(sample_of(page, "cordma_rpc_latency_seconds_count{server=\"1\",method=\"echo\"}") ==
          static_cast<double>(total));
    CHECK(sample_of(page, "cordma_rpc_client_latency_seconds_count") == static_cast<double>(total));
    CHECK(sample_of(page, "cordma_rpc_client_latency_seconds{quantile=\"0.5\"}") > 0);
    std::uint64_t by_clients = 0;
    for (const rpc::client& c : clients)
        by_clients += c.metrics().answered;
    CHECK(by_clients == total);
    auto [lint, said] = run("promtool check metrics", page);
    INFO("promtool says: " << said);
    CHECK(lint == 0);
    CHECK(said.empty());
    std::string json = test::http_get_ok(env_address, "/metrics.json");
    auto [py, calls] = run("python3 -c 'import json,sys; d=json.load(sys.stdin); "
                           "print(d[\"rpc_servers\"][0][\"methods\"][0][\"calls\"], len(d[\"connections\"]))'",
                           json);
    CHECK(py == 0);
    CHECK(calls == std::to_string(total) + " 32\n");

    clients.clear();
    stop_serving.request_stop();
    serving.join();
    // Every client's end counted once: 16 closed here, and the server's 16
    // queue pairs ended by those clients (or by the server's own close of
    // a connection whose client went, if it saw that first).
    auto ends = [&] {
        metrics_snapshot m = process_metrics();
        std::uint64_t n = 0;
        for (std::uint64_t d : m.disconnects)
            n += d;
        return n;
    };
    for (int i = 0; i < 500 && ends() < 32; ++i)
        std::this_thread::sleep_for(10ms);
    metrics_snapshot m = process_metrics();
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::closed_here)] >= 16);
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::closed_here)] +
              m.disconnects[static_cast<std::size_t>(disconnect_cause::peer_closed)] ==
          32);
    CHECK(m.disconnects[static_cast<std::size_t>(disconnect_cause::failed_completion)] == 0);

    // Nothing listening: cordma-stat says so and fails.
    auto [rc5, missing] = run(stat_program() + " -n 1 -i 0.1 unix:/tmp/cordma-stat-nobody.sock");
    CHECK(rc5 == 1);
    CHECK_THAT(missing, Catch::Contains("cannot read the metrics at unix:/tmp/cordma-stat-nobody.sock: connect:"));
}
