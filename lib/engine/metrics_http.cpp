// metrics_http.hpp: parsing the endpoint's requests and rendering the
// pages (process_metrics.hpp) they ask for.
#include "engine/metrics_http.hpp"

#include <cstdlib>
#include <optional>

#include <cordma/stuck_report.hpp>

#include "engine/process_metrics.hpp"

namespace cordma::detail {

namespace {

std::string response(const char* status, const char* type, const std::string& body, bool head) {
    std::string out = std::string("HTTP/1.0 ") + status + "\r\n";
    out += std::string("Content-Type: ") + type + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n";
    if (!head)
        out += body;
    return out;
}

std::string plain(const char* status, const std::string& text, bool head = false) {
    return response(status, "text/plain; charset=utf-8", text + "\n", head);
}

// The value of `key` in a query ("a=1&b=0"; a bare "a" is "1"), if there.
std::optional<std::string_view> query_value(std::string_view query, std::string_view key) {
    while (!query.empty()) {
        std::size_t amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        std::size_t eq = pair.find('=');
        if (pair.substr(0, eq) == key)
            return eq == std::string_view::npos ? std::string_view("1") : pair.substr(eq + 1);
    }
    return std::nullopt;
}

bool flag(std::string_view query, std::string_view key, bool fallback) {
    auto v = query_value(query, key);
    return v ? !(*v == "0" || *v == "false" || *v == "no") : fallback;
}

}  // namespace

std::string metrics_response(std::string_view request) {
    // "GET /metrics?connections=1 HTTP/1.1"
    std::string_view line = request.substr(0, request.find_first_of("\r\n"));
    std::size_t sp1 = line.find(' ');
    std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).substr(0, 5) != "HTTP/")
        return plain("400 Bad Request", "cordma metrics endpoint: expected an HTTP request line, e.g. "
                                        "\"GET /metrics HTTP/1.0\"");
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    bool head = method == "HEAD";
    if (method != "GET" && !head)
        return plain("405 Method Not Allowed", "cordma metrics endpoint: GET or HEAD only");
    std::size_t q = target.find('?');
    std::string_view path = target.substr(0, q);
    std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    if (path == "/metrics") {
        prometheus_options options;
        options.connections = flag(query, "connections", false);
        options.peer_hosts = flag(query, "peer_hosts", true);
        return response("200 OK", "text/plain; version=0.0.4; charset=utf-8", process_prometheus(options), head);
    }
    if (path == "/stuck") {
        std::size_t limit = 20;
        if (auto v = query_value(query, "limit"))
            limit = std::strtoul(std::string(*v).c_str(), nullptr, 10);
        return response("200 OK", "text/plain; charset=utf-8", to_text(process_stuck(limit == 0 ? 20 : limit)), head);
    }
    if (path == "/metrics.json")
        return response("200 OK", "application/json", process_json(), head);
    if (path == "/")
        return plain("200 OK", "cordma metrics: /metrics (Prometheus text; ?connections=1 adds each queue pair), "
                               "/metrics.json, /stuck (the oldest pending operations; ?limit=N)",
                     head);
    return plain("404 Not Found", "cordma metrics endpoint: no page " + std::string(path) +
                                      " (/metrics, /metrics.json, /stuck)",
                 head);
}

}  // namespace cordma::detail
