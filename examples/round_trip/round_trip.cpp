// round_trip: the smallest complete RDMA program on cordma's verbs layer.
// Two RC queue pairs on one device, connected to each other (loopback), move
// a message with SEND/RECV, then RDMA WRITE it into the peer's region and
// RDMA READ it back, printing the bytes that moved each time.
//
// Usage: round_trip [device]   (default: $RXE_VM_DEVICE, $CORDMA_TEST_DEVICE,
//                               or the first device with an active port)

#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cordma/completion_queue.hpp>
#include <cordma/memory_region.hpp>
#include <cordma/queue_pair.hpp>

using namespace cordma;

namespace {

ibv_wc wait_for(completion_queue& cq) {
    ibv_wc wc{};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (cq.poll({&wc, 1}) == 0)
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("no completion within 30 s");
    if (wc.status != IBV_WC_SUCCESS)
        throw std::runtime_error(std::string("work completion failed: ") + ibv_wc_status_str(wc.status));
    return wc;
}

std::string device_from_environment(int argc, char** argv) {
    if (argc > 1)
        return argv[1];
    for (const char* name : {"RXE_VM_DEVICE", "CORDMA_TEST_DEVICE"})
        if (const char* v = std::getenv(name))
            return v;
    return {};
}

void show(const char* what, const char* bytes, std::size_t length) {
    std::printf("%-12s %4zu bytes: \"%.*s\"\n", what, length, static_cast<int>(length), bytes);
}

}  // namespace

int main(int argc, char** argv) try {
    auto device = device_context::open(device_from_environment(argc, argv));
    auto pd = protection_domain::create(device);
    auto cq_a = completion_queue::create(device, 16);
    auto cq_b = completion_queue::create(device, 16);
    auto a = queue_pair::create(pd, cq_a, cq_a);
    auto b = queue_pair::create(pd, cq_b, cq_b);

    qp_connect_options options;
    options.port = device->first_active_port();
    options.gid_index = device->find_gid_index(options.port, AF_INET);
    a->connect(b->local_endpoint(options.port, options.gid_index), options);
    b->connect(a->local_endpoint(options.port, options.gid_index), options);
    std::printf("device %s port %u: qp %u <-> qp %u connected\n", device->name().c_str(), options.port,
                a->qp_num(), b->qp_num());

    char buffer_a[256] = "hello from queue pair A over RDMA SEND";
    char buffer_b[256] = {};
    auto mr_a = memory_region::register_memory(pd, buffer_a, sizeof buffer_a, access_flags::all);
    auto mr_b = memory_region::register_memory(pd, buffer_b, sizeof buffer_b, access_flags::all);

    // SEND/RECV: B posts a receive, A sends into it.
    std::uint32_t length = static_cast<std::uint32_t>(std::strlen(buffer_a) + 1);
    ibv_sge recv_sge{reinterpret_cast<std::uint64_t>(buffer_b), sizeof buffer_b, mr_b.lkey()};
    ibv_recv_wr recv{.wr_id = 1, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
    b->post_recv(recv);
    ibv_sge send_sge{reinterpret_cast<std::uint64_t>(buffer_a), length, mr_a.lkey()};
    ibv_send_wr send{};
    send.sg_list = &send_sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    a->post_send(send);
    wait_for(*cq_a);
    ibv_wc received = wait_for(*cq_b);
    show("SEND->RECV", buffer_b, received.byte_len - 1);

    // RDMA WRITE: A writes into B's region; B's CPU is not involved.
    std::snprintf(buffer_a, sizeof buffer_a, "written by A straight into B's memory");
    length = static_cast<std::uint32_t>(std::strlen(buffer_a) + 1);
    send_sge.length = length;
    send.opcode = IBV_WR_RDMA_WRITE;
    send.wr.rdma.remote_addr = mr_b.remote().address;
    send.wr.rdma.rkey = mr_b.remote().rkey;
    a->post_send(send);
    wait_for(*cq_a);
    show("RDMA WRITE", buffer_b, length - 1);

    // RDMA READ: A reads B's region back into a cleared buffer.
    std::memset(buffer_a, 0, sizeof buffer_a);
    send.opcode = IBV_WR_RDMA_READ;
    a->post_send(send);
    wait_for(*cq_a);
    show("RDMA READ", buffer_a, length - 1);

    bool ok = std::strcmp(buffer_a, buffer_b) == 0;
    std::printf("round trip %s: %u bytes read back match what was written\n", ok ? "ok" : "FAILED", length);
    return ok ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "round_trip: %s\n", e.what());
    return 1;
}
