// metrics.hpp's arithmetic and renderings on snapshots made by hand (no
// device): sums, peer hosts from every address form, label escaping, and
// the Prometheus page's shape. metrics_test checks real counts and runs
// promtool on a live process's page.

#include <string>

#include <catch2/catch.hpp>

#include <cordma/metrics.hpp>

using namespace cordma;

namespace {

connection_metrics qp(std::string peer, std::uint32_t num, std::uint64_t writes) {
    connection_metrics c;
    c.peer = std::move(peer);
    c.qp_num = num;
    c.role = "data";
    c.counters.operations[static_cast<std::size_t>(operation_kind::write)] = {writes, writes, 0, writes * 100};
    c.counters.completions[0] = writes;
    c.counters.work_requests = writes;
    return c;
}

}  // namespace

TEST_CASE("snapshots sum live and closed counters, and group them by peer host", "[metrics]") {
    metrics_snapshot m;
    m.connections = {qp("10.0.0.2:7471", 1, 3), qp("10.0.0.2:7471 (agent)", 2, 4), qp("[fe80::1]:9000", 3, 5),
                     qp("10.0.0.3:41000", 4, 6), qp("fe80::2", 5, 7)};
    m.closed.operations[static_cast<std::size_t>(operation_kind::write)].completed = 100;
    CHECK(m.total()[operation_kind::write].completed == 3 + 4 + 5 + 6 + 7 + 100);
    CHECK(m.total()[operation_kind::write].bytes == (3 + 4 + 5 + 6 + 7) * 100);
    CHECK(m.total().completions_reaped() == 3 + 4 + 5 + 6 + 7);

    auto hosts = m.by_peer_host();
    REQUIRE(hosts.size() == 4);
    CHECK(hosts[0].first == "10.0.0.2");
    CHECK(hosts[0].second[operation_kind::write].completed == 7);
    CHECK(hosts[1].first == "[fe80::1]");
    CHECK(hosts[2].first == "10.0.0.3");
    CHECK(hosts[3].first == "fe80::2");
}

TEST_CASE("the Prometheus page has every family once, typed, and escapes label values", "[metrics]") {
    metrics_snapshot m;
    m.connections = {qp("a\"b\\c:1", 7, 2)};
    m.opened = 3;
    m.gone = 2;
    m.disconnects[static_cast<std::size_t>(disconnect_cause::peer_closed)] = 2;
    m.connections[0].broken = true;
    m.connections[0].cause = disconnect_cause::failed_completion;
    m.disconnects[static_cast<std::size_t>(disconnect_cause::failed_completion)] = 1;
    std::string page = to_prometheus(m, {.peer_hosts = true, .connections = true});
    CHECK_THAT(page, Catch::Contains("cordma_disconnects_total{cause=\"closed_here\"} 0\n"));
    CHECK_THAT(page, Catch::Contains("cordma_disconnects_total{cause=\"peer_closed\"} 2\n"));
    CHECK_THAT(page, Catch::Contains("cordma_disconnects_total{cause=\"failed_completion\"} 1\n"));
    CHECK_THAT(page, Catch::Contains("cordma_qp_broken{peer=\"a\\\"b\\\\c:1\",qp=\"7\",role=\"data\"} 1\n"));
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_operations_completed_total counter\n"));
    CHECK_THAT(page, Catch::Contains("cordma_operations_completed_total{kind=\"write\"} 2\n"));
    CHECK_THAT(page, Catch::Contains("cordma_queue_pairs 1\n"));
    CHECK_THAT(page, Catch::Contains("cordma_queue_pairs_opened_total 3\n"));
    CHECK_THAT(page, Catch::Contains("cordma_peer_operations_completed_total{host=\"a\\\"b\\\\c\",kind=\"write\"} 2\n"));
    CHECK_THAT(page, Catch::Contains("cordma_qp_work_requests_total{peer=\"a\\\"b\\\\c:1\",qp=\"7\",role=\"data\"} 2\n"));
    // Each family's TYPE line appears once.
    std::size_t at = 0, types = 0;
    while ((at = page.find("# TYPE cordma_work_requests_total ", at)) != std::string::npos) {
        ++types;
        ++at;
    }
    CHECK(types == 1);
    // Latency: a summary per kind but recv, NaN quantiles while empty,
    // and the maximum beside it.
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_operation_latency_seconds summary\n"));
    CHECK_THAT(page, Catch::Contains("cordma_operation_latency_seconds{kind=\"read\",quantile=\"0.99\"} NaN\n"));
    CHECK_THAT(page, Catch::Contains("cordma_operation_latency_seconds_count{kind=\"read\"} 0\n"));
    CHECK_THAT(page, !Catch::Contains("cordma_operation_latency_seconds_count{kind=\"recv\"}"));
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_operation_latency_max_seconds gauge\n"));
    m.latency[static_cast<std::size_t>(operation_kind::write)].record(1500);
    m.latency[static_cast<std::size_t>(operation_kind::write)].record(2500);
    std::string timed = to_prometheus(m);
    CHECK_THAT(timed, Catch::Contains("cordma_operation_latency_seconds_count{kind=\"write\"} 2\n"));
    CHECK_THAT(timed, Catch::Contains("cordma_operation_latency_seconds_sum{kind=\"write\"} 4e-06\n"));
    CHECK_THAT(timed, Catch::Contains("cordma_operation_latency_max_seconds{kind=\"write\"} 2.5e-06\n"));
    CHECK_THAT(to_json(m), Catch::Contains("\"write\": {\"count\": 2, \"p50_ns\": 1535, "));
    // Without the per-connection option, no qp series.
    CHECK_THAT(to_prometheus(m), !Catch::Contains("cordma_qp_"));

    std::string json = to_json(m);
    CHECK_THAT(json, Catch::Contains("\"peer\": \"a\\\"b\\\\c:1\""));
    CHECK_THAT(json, Catch::Contains("\"write\": {\"posted\": 2, \"completed\": 2, \"failed\": 0, \"bytes\": 200}"));
    CHECK_THAT(json, Catch::Contains("\"disconnects\": {\"closed_here\": 0, \"peer_closed\": 2, "
                                     "\"failed_completion\": 1, \"other\": 0}"));
    CHECK_THAT(json, Catch::Contains("\"cause\": \"failed_completion\""));
    CHECK(std::string(name(disconnect_cause::closed_here)) == "closed_here");
}

TEST_CASE("shared receive queues and the devices' own counters are rendered and summed", "[metrics]") {
    metrics_snapshot m;
    m.connections = {qp("10.0.0.2:7471", 1, 3)};
    shared_receive_metrics q;
    q.device = "rxe0";
    q.id = 4;
    q.size = 16;
    q.buffer_size = 256;
    q.connections = 2;
    q.ready = 15;
    q.fewest_ready = 0;
    q.counters.operations[static_cast<std::size_t>(operation_kind::recv)] = {116, 100, 1, 2400};
    q.counters.completions[0] = 100;
    q.counters.completions[1] = 1;  // loc_len_err
    m.shared_receive_queues = {q};
    // In the totals, beside the connections'.
    CHECK(m.total()[operation_kind::recv].completed == 100);
    CHECK(m.total()[operation_kind::write].completed == 3);
    CHECK(m.total().completions_reaped() == 3 + 101);
    device_counters d;
    d.device = "rxe0";
    d.port = 1;
    d.hw_counters = {{"rcvd_seq_err", 41}, {"completer_retry_err", 1400}};
    d.port_counters = {{"port_rcv_packets", 7}, {"rcvd_seq_err", 99}};  // a name in both: the driver's wins
    m.devices = {d};

    std::string page = to_prometheus(m);
    const std::string srq = "{device=\"rxe0\",srq=\"4\"} ";
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_srq_receives_ready gauge\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_size" + srq + "16\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_connections" + srq + "2\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_receives_ready" + srq + "15\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_receives_fewest_ready" + srq + "0\n"));
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_srq_messages_total counter\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_messages_total" + srq + "100\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_message_bytes_total" + srq + "2400\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_srq_receives_failed_total" + srq + "1\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_operations_completed_total{kind=\"recv\"} 100\n"));
    CHECK_THAT(page, Catch::Contains("\ncordma_completions_total{status=\"loc_len_err\"} 1\n"));
    CHECK_THAT(page, Catch::Contains("# TYPE cordma_device_events_total counter\n"));
    const std::string port = "cordma_device_events_total{device=\"rxe0\",port=\"1\",counter=\"";
    CHECK_THAT(page, Catch::Contains("\n" + port + "completer_retry_err\"} 1400\n"));
    CHECK_THAT(page, Catch::Contains("\n" + port + "rcvd_seq_err\"} 41\n"));
    CHECK_THAT(page, Catch::Contains("\n" + port + "port_rcv_packets\"} 7\n"));
    CHECK_THAT(page, !Catch::Contains("rcvd_seq_err\"} 99"));

    std::string json = to_json(m);
    CHECK_THAT(json, Catch::Contains("\"shared_receive_queues\": [{\"device\": \"rxe0\", \"id\": 4, \"size\": 16, "
                                     "\"buffer_size\": 256, \"connections\": 2, \"ready\": 15, \"fewest_ready\": 0, "
                                     "\"counters\": {\"operations\": {"));
    CHECK_THAT(json, Catch::Contains("\"recv\": {\"posted\": 116, \"completed\": 100, \"failed\": 1, \"bytes\": 2400}"));
    CHECK_THAT(json, Catch::Contains("\"devices\": [{\"device\": \"rxe0\", \"port\": 1, \"port_counters\": "
                                     "{\"port_rcv_packets\": 7, \"rcvd_seq_err\": 99}, \"hw_counters\": "
                                     "{\"completer_retry_err\": 1400, \"rcvd_seq_err\": 41}}]"));
    // Neither section when there is nothing to show.
    metrics_snapshot empty;
    CHECK_THAT(to_prometheus(empty), !Catch::Contains("cordma_srq_") && !Catch::Contains("cordma_device_"));
    CHECK_THAT(to_json(empty), Catch::Contains("\"shared_receive_queues\": [], \"devices\": []}"));
}
