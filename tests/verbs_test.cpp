// The first real traffic: two RC queue pairs on the test device, connected to
// each other in one process (loopback), moving bytes with SEND/RECV, RDMA
// WRITE and RDMA READ. Completions are polled directly here; the event
// listener has its own suite.

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include <cordma/completion_queue.hpp>
#include <cordma/device_counters.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/queue_pair.hpp>

#include "support/rxe_device.hpp"

using namespace cordma;

namespace {

// Busy-polls `cq` for one completion, failing the test after a generous
// deadline rather than hanging (the emulated guest is slow).
ibv_wc wait_for_completion(completion_queue& cq) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    ibv_wc wc{};
    while (cq.poll({&wc, 1}) == 0) {
        if (std::chrono::steady_clock::now() > deadline)
            FAIL("no work completion within 30 s");
    }
    INFO("wc status: " << ibv_wc_status_str(wc.status));
    REQUIRE(wc.status == IBV_WC_SUCCESS);
    return wc;
}

struct loopback_pair {
    std::shared_ptr<device_context> device = test::open_test_device();
    std::shared_ptr<protection_domain> pd = protection_domain::create(device);
    std::shared_ptr<completion_queue> cq_a = completion_queue::create(device, 64);
    std::shared_ptr<completion_queue> cq_b = completion_queue::create(device, 64);
    std::shared_ptr<queue_pair> a = queue_pair::create(pd, cq_a, cq_a);
    std::shared_ptr<queue_pair> b = queue_pair::create(pd, cq_b, cq_b);

    loopback_pair() {
        qp_connect_options options;
        options.port = device->first_active_port();
        REQUIRE(options.port != 0);
        options.gid_index = device->find_gid_index(options.port, AF_INET);
        a->connect(b->local_endpoint(options.port, options.gid_index), options);
        b->connect(a->local_endpoint(options.port, options.gid_index), options);
    }
};

std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
    std::vector<unsigned char> bytes(size);
    for (std::size_t i = 0; i < size; ++i)
        bytes[i] = static_cast<unsigned char>((i * 31 + seed) & 0xff);
    return bytes;
}

}  // namespace

TEST_CASE("the test device is a real, active RDMA device", "[verbs]") {
    auto device = test::open_test_device();
    INFO("device " << device->name());
    REQUIRE(device->first_active_port() != 0);
    WARN("rxe suite running on device " << device->name());
}

TEST_CASE("two loopback RC queue pairs move real bytes", "[verbs]") {
    loopback_pair pair;
    constexpr std::size_t size = 4096;
    std::vector<unsigned char> buffer_a = pattern(size, 7);
    std::vector<unsigned char> buffer_b(size, 0);
    auto mr_a = memory_region::register_memory(pair.pd, buffer_a.data(), size, access_flags::all);
    auto mr_b = memory_region::register_memory(pair.pd, buffer_b.data(), size, access_flags::all);

    SECTION("SEND lands in the posted RECV") {
        ibv_sge recv_sge{reinterpret_cast<std::uint64_t>(buffer_b.data()), size, mr_b.lkey()};
        ibv_recv_wr recv{};
        recv.wr_id = 2;
        recv.sg_list = &recv_sge;
        recv.num_sge = 1;
        pair.b->post_recv(recv);

        ibv_sge send_sge{reinterpret_cast<std::uint64_t>(buffer_a.data()), 1000, mr_a.lkey()};
        ibv_send_wr send{};
        send.wr_id = 1;
        send.sg_list = &send_sge;
        send.num_sge = 1;
        send.opcode = IBV_WR_SEND;
        send.send_flags = IBV_SEND_SIGNALED;
        pair.a->post_send(send);

        ibv_wc sent = wait_for_completion(*pair.cq_a);
        CHECK(sent.wr_id == 1);
        CHECK(sent.opcode == IBV_WC_SEND);
        ibv_wc received = wait_for_completion(*pair.cq_b);
        CHECK(received.wr_id == 2);
        CHECK(received.opcode == IBV_WC_RECV);
        CHECK(received.byte_len == 1000);
        CHECK(std::memcmp(buffer_b.data(), buffer_a.data(), 1000) == 0);
        CHECK(buffer_b[1000] == 0);
    }

    SECTION("RDMA WRITE places bytes in the peer's region without its CPU") {
        ibv_sge sge{reinterpret_cast<std::uint64_t>(buffer_a.data()), size, mr_a.lkey()};
        ibv_send_wr write{};
        write.wr_id = 3;
        write.sg_list = &sge;
        write.num_sge = 1;
        write.opcode = IBV_WR_RDMA_WRITE;
        write.send_flags = IBV_SEND_SIGNALED;
        write.wr.rdma.remote_addr = mr_b.remote().address;
        write.wr.rdma.rkey = mr_b.remote().rkey;
        pair.a->post_send(write);

        ibv_wc wc = wait_for_completion(*pair.cq_a);
        CHECK(wc.opcode == IBV_WC_RDMA_WRITE);
        CHECK(buffer_b == buffer_a);
    }

    SECTION("RDMA READ fetches the peer's bytes") {
        std::vector<unsigned char> remote_bytes = pattern(size, 99);
        std::memcpy(buffer_b.data(), remote_bytes.data(), size);
        ibv_sge sge{reinterpret_cast<std::uint64_t>(buffer_a.data()), size, mr_a.lkey()};
        ibv_send_wr read{};
        read.wr_id = 4;
        read.sg_list = &sge;
        read.num_sge = 1;
        read.opcode = IBV_WR_RDMA_READ;
        read.send_flags = IBV_SEND_SIGNALED;
        read.wr.rdma.remote_addr = mr_b.remote().address;
        read.wr.rdma.rkey = mr_b.remote().rkey;
        pair.a->post_send(read);

        ibv_wc wc = wait_for_completion(*pair.cq_a);
        CHECK(wc.opcode == IBV_WC_RDMA_READ);
        CHECK(buffer_a == remote_bytes);
    }
}

TEST_CASE("verbs failures name the call and its arguments", "[verbs]") {
    auto device = test::open_test_device();
    auto pd = protection_domain::create(device);

    SECTION("a device that does not exist lists the ones that do") {
        try {
            (void)device_context::open("no_such_device0");
            FAIL("opened a device that does not exist");
        } catch (const verbs_error& e) {
            std::string what = e.what();
            CHECK_THAT(what, Catch::Contains("no_such_device0"));
            CHECK_THAT(what, Catch::Contains(device->name()));
            CHECK(e.code() == std::errc::no_such_device);
        }
    }
    SECTION("remote write without local write is refused, naming length and access") {
        // Remote write without local write is refused by the verbs: EINVAL.
        static char buffer[64];
        try {
            (void)memory_region::register_memory(pd, buffer, sizeof buffer, access_flags::remote_write);
            FAIL("registered remote_write without local_write");
        } catch (const verbs_error& e) {
            CHECK_THAT(e.what(), Catch::StartsWith("ibv_reg_mr(length=64, access=remote_write): "));
        }
    }
}

TEST_CASE("the device's own counters count real traffic", "[verbs][device_counters]") {
    loopback_pair pair;
    const std::uint8_t port = pair.device->first_active_port();
    device_counters before = read_device_counters(*pair.device, port);
    CHECK(before.device == pair.device->name());
    CHECK(before.port == port);
    REQUIRE(before.hw_counters.size() + before.port_counters.size() > 0);

    constexpr int sends = 50;
    std::vector<unsigned char> out = pattern(1000, 3), in(1000 * sends, 0);
    auto mr_out = memory_region::register_memory(pair.pd, out.data(), out.size(), access_flags::local_write);
    auto mr_in = memory_region::register_memory(pair.pd, in.data(), in.size(), access_flags::local_write);
    for (int i = 0; i < sends; ++i) {
        ibv_sge sge{reinterpret_cast<std::uint64_t>(in.data() + 1000 * i), 1000, mr_in.lkey()};
        ibv_recv_wr recv{};
        recv.sg_list = &sge;
        recv.num_sge = 1;
        pair.b->post_recv(recv);
    }
    for (int i = 0; i < sends; ++i) {
        ibv_sge sge{reinterpret_cast<std::uint64_t>(out.data()), 1000, mr_out.lkey()};
        ibv_send_wr send{};
        send.sg_list = &sge;
        send.num_sge = 1;
        send.opcode = IBV_WR_SEND;
        send.send_flags = IBV_SEND_SIGNALED;
        pair.a->post_send(send);
        REQUIRE(wait_for_completion(*pair.cq_a).status == IBV_WC_SUCCESS);
        REQUIRE(wait_for_completion(*pair.cq_b).status == IBV_WC_SUCCESS);
    }
    // rxe counts packets in hw_counters (sent_pkts, rcvd_pkts); devices
    // with IB port counters in port_xmit_packets and port_rcv_packets. The
    // kernel refreshes hw_counters at most every `lifespan` ms (10 by
    // default), so a reading right after the traffic may still be the old
    // one: read until the packets show, for at most 5 s.
    auto sent = [](const device_counters& d) { return d["sent_pkts"] + d["port_xmit_packets"]; };
    device_counters delta = read_device_counters(*pair.device, port).since(before);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         sent(delta) < sends && std::chrono::steady_clock::now() < until;)
        delta = read_device_counters(*pair.device, port).since(before);  // polling the kernel's counters
    INFO("sent_pkts " << delta["sent_pkts"] << ", port_xmit_packets " << delta["port_xmit_packets"]);
    CHECK(delta["sent_pkts"] + delta["port_xmit_packets"] >= sends);
    CHECK(delta["rcvd_pkts"] + delta["port_rcv_packets"] >= sends);
}

TEST_CASE("device counters are read as the kernel lays them out, and a missing port is named", "[device_counters]") {
    namespace fs = std::filesystem;
    fs::path root = fs::temp_directory_path() / ("cordma-counters-" + std::to_string(::getpid()));
    fs::create_directories(root / "dev0/ports/1/hw_counters");
    fs::create_directories(root / "dev0/ports/1/counters");
    auto put = [](const fs::path& file, const char* text) { std::ofstream(file) << text; };
    put(root / "dev0/ports/1/hw_counters/retry_exceeded_err", "3\n");
    put(root / "dev0/ports/1/hw_counters/lifespan", "10\n");     // a setting, not a counter
    put(root / "dev0/ports/1/hw_counters/garbled", "n/a\n");     // not a number: left out
    put(root / "dev0/ports/1/counters/port_xmit_packets", "1000\n");
    device_counters earlier = read_device_counters("dev0", 1, root);
    put(root / "dev0/ports/1/counters/port_xmit_packets", "1250\n");
    device_counters now = read_device_counters("dev0", 1, root);
    CHECK(now["retry_exceeded_err"] == 3);
    CHECK(now["port_xmit_packets"] == 1250);
    CHECK(now.hw_counters.count("lifespan") == 0);
    CHECK(now.hw_counters.count("garbled") == 0);
    CHECK(now["no_such_counter"] == 0);
    device_counters delta = now.since(earlier);
    CHECK(delta["port_xmit_packets"] == 250);
    CHECK(delta["retry_exceeded_err"] == 0);

    try {
        (void)read_device_counters("dev0", 2, root);
        FAIL("port 2 has no counters, and reading them did not throw");
    } catch (const std::system_error& e) {
        CHECK(e.code() == std::errc::no_such_file_or_directory);
        CHECK_THAT(e.what(), Catch::Contains("dev0, port 2") && Catch::Contains((root / "dev0/ports/2").string()));
    }
    fs::remove_all(root);
}
