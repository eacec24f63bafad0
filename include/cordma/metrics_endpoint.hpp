#pragma once
/// \file
/// A running program's metrics, served for a scrape: HTTP on a Unix
/// socket or a loopback TCP port, off unless asked for.
///
/// ```
/// cordma::metrics_endpoint endpoint("unix:/run/myapp/cordma.sock");
/// // curl --unix-socket /run/myapp/cordma.sock http://localhost/metrics
/// // cordma-stat unix:/run/myapp/cordma.sock
/// ```
///
/// Started three ways: this class (it serves while it lives), a builder's
/// setting (builder::metrics_endpoint: while that builder's connections
/// live), or the environment, `CORDMA_METRICS=unix:/path` or
/// `CORDMA_METRICS=127.0.0.1:9464`, read when the process's first event
/// listener starts (then it serves until the process ends). Whichever
/// started it, it serves the whole process: process_metrics() and the
/// modules' parts (an rpc server's methods).
///
/// Paths (HTTP/1.0 or 1.1, GET or HEAD; one request per connection):
/// - `/metrics`: Prometheus' text format 0.0.4 (to_prometheus); the query
///   `?connections=1` adds the series per queue pair, `?peer_hosts=0`
///   drops those per peer host.
/// - `/metrics.json`: the same as JSON (to_json, and the modules' members).
///
/// A thread of its own waits for requests and renders each page there: the
/// event listeners are never stopped or visited for a scrape (the counters
/// are read as metrics_snapshot says). It serves one client at a time, and
/// each has 2 s to send its request and 2 s to take its page, whatever it
/// does meanwhile (a silent or trickling client is answered or cut off
/// then, and the next one served).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <cordma/export.hpp>

namespace cordma {

/// Serves process_metrics() (and the modules' counts) over HTTP while it
/// lives, from a thread of its own. Neither copyable nor movable: the
/// thread refers to it.
class CORDMA_API metrics_endpoint {
public:
    /// Starts serving at `where`: "unix:PATH" (or a PATH starting with '/'
    /// or '.'), a Unix socket made there (a stale socket file left by a
    /// process gone is replaced; one another process serves is not);
    /// "unix:@NAME", a socket in Linux's abstract namespace (no file); or
    /// "HOST:PORT" with a loopback HOST ("127.0.0.1", "localhost", "[::1]")
    /// and PORT 0 for any free port (address() says which). Throws
    /// std::invalid_argument for an address of another form or not on
    /// loopback (metrics name every peer: serve them further through a
    /// scraper of your own), std::system_error when the socket cannot be
    /// made or bound (the message names the address).
    explicit metrics_endpoint(std::string_view where);
    /// Stops serving (a request being answered is finished first, within
    /// its 2 + 2 s) and removes the Unix socket's file.
    ~metrics_endpoint();
    metrics_endpoint(const metrics_endpoint&) = delete;
    metrics_endpoint& operator=(const metrics_endpoint&) = delete;

    /// Where it serves: "unix:/path" or "127.0.0.1:41532" (the port bound).
    const std::string& address() const noexcept;
    /// Requests answered so far (any status).
    std::uint64_t requests() const noexcept;

private:
    struct state;
    std::unique_ptr<state> state_;
};

}  // namespace cordma
