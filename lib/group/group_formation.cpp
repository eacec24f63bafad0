#include "group/group_formation.hpp"

#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/device.hpp>
#include <cordma/error.hpp>
#include <cordma/receive_queue.hpp>
#include <cordma/task_group.hpp>

#include "group/group_core.hpp"
#include "link/link_wire.hpp"
#include "link/peer_link.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace wire = link_wire;
using clock = std::chrono::steady_clock;

namespace {

std::chrono::milliseconds left_until(clock::time_point deadline) {
    // Rounded up: a timer armed for the truncated time fires before the
    // deadline, and the formation then took its timeout for a refusal.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
    return std::max(left, std::chrono::milliseconds(1));
}

/// FNV-1a over every endpoint: two processes with different host lists
/// (or launchers) never take each other for a member.
std::uint64_t group_id(const group_core& core) {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&](unsigned char c) {
        h ^= c;
        h *= 1099511628211ull;
    };
    for (int r = 0; r < core.size(); ++r) {
        for (char c : core.endpoint(r))
            mix(static_cast<unsigned char>(c));
        mix('\n');
    }
    return h;
}

struct hello {
    int from = -1;
    int to = -1;
    int size = 0;
    std::uint64_t id = 0;
    std::uint32_t window = 0;
    std::size_t eager = 0;
    bool reads_traces = true;  // the sender takes traced frames
};

wire::header to_header(const hello& h) {
    wire::header w;
    w.type = wire::frame::hello;
    w.root = static_cast<std::uint32_t>(h.size);
    w.extra = static_cast<std::uint32_t>(h.from);
    w.step = static_cast<std::uint16_t>(h.to);
    w.seq = h.window;
    w.size = h.id;
    w.addr = h.eager;
    w.rkey = h.reads_traces ? wire::hello_reads_traces : 0;
    return w;
}

/// One connection being confirmed: its receives are posted before anything
/// is sent, so the peer's hello finds one.
struct handshake {
    std::shared_ptr<group_core> core;
    cordma::connection conn;
    receive_queue queue;
    local_mr hello_buffer;

    handshake(std::shared_ptr<group_core> c, cordma::connection cn)
        : core(std::move(c)),
          conn(std::move(cn)),
          queue(conn, peer_link::receive_count(core->options().window), peer_link::first_frame_size(core->options().eager_size),
                core->builder().pool()),
          hello_buffer(core->builder().pool()->allocate(wire::header_size)) {}

    task<void> send_hello(int to) {
        hello h{core->rank(), to, core->size(), group_id(*core), core->options().window, core->options().eager_size};
        wire::encode(to_header(h), std::span<std::byte, wire::header_size>(hello_buffer.data(), wire::header_size));
        co_await conn.send(hello_buffer.all());
    }

    /// The peer's hello, checked against this group; std::runtime_error
    /// saying what is wrong otherwise.
    task<hello> receive_hello(clock::time_point deadline, std::stop_token token) {
        received_message m = co_await queue.next(left_until(deadline), token);
        std::string why;
        std::optional<wire::header> w = wire::decode(m.bytes(), why);
        if (!w)
            throw std::runtime_error("its first frame is " + why);
        if (w->type != wire::frame::hello)
            throw std::runtime_error(std::string("its first frame is a ") + wire::name(w->type) + ", not a hello");
        hello h;
        h.size = static_cast<int>(w->root);
        h.from = static_cast<int>(w->extra);
        h.to = w->step;
        h.window = w->seq;
        h.id = w->size;
        h.eager = static_cast<std::size_t>(w->addr);
        h.reads_traces = (w->rkey & wire::hello_reads_traces) != 0;
        if (h.size != core->size() || h.id != group_id(*core))
            throw std::runtime_error("it belongs to another group (" + std::to_string(h.size) +
                                     " ranks, or other endpoints: check that every rank has the same host list)");
        if (h.to != core->rank())
            throw std::runtime_error("it wanted rank " + std::to_string(h.to) + ", this is rank " +
                                     std::to_string(core->rank()));
        if (h.from < 0 || h.from >= core->size() || h.from == core->rank())
            throw std::runtime_error("it says it is rank " + std::to_string(h.from));
        if (h.eager != core->options().eager_size)
            throw std::runtime_error("its eager size is " + std::to_string(h.eager) + " bytes, this rank's " +
                                     std::to_string(core->options().eager_size) +
                                     " (group_options::eager_size must be the same on every rank)");
        if (h.window < 2 || h.window > 4096)
            throw std::runtime_error("its window of " + std::to_string(h.window) + " frames is out of range");
        co_return h;
    }

    std::shared_ptr<peer_link> make_link(const hello& h) {
        auto link = std::make_shared<peer_link>(core, h.from, core->rank_name(h.from), conn, std::move(queue),
                                                core->options().window, h.window, core->options().eager_size,
                                                core->options().eager_size, core->builder().pool());
        link->set_peer_reads_traces(h.reads_traces);
        return link;
    }
};

struct formation {
    std::shared_ptr<group_core> core;
    clock::time_point deadline;
    std::map<int, std::string> failures;  // rank -> why it is missing
    int higher_linked = 0;
    std::stop_source accept_stop;
};

task<void> connect_to(std::shared_ptr<formation> f, cordma::builder b, int peer, std::stop_token token) {
    auto core = f->core;
    cordma::connection made;
    bool failed = false;
    try {
        b.connect_timeout(left_until(f->deadline));
        made = co_await b.connect(core->endpoint(peer));
        handshake hs(core, made);
        co_await hs.send_hello(peer);
        hello h = co_await hs.receive_hello(f->deadline, token);
        if (h.from != peer)
            throw std::runtime_error("it says it is rank " + std::to_string(h.from));
        core->set_link(peer, hs.make_link(h));
    } catch (const std::exception& e) {
        failed = true;
        f->failures[peer] = std::string("connecting to it: ") + e.what();
        // Waiting longer cannot mend a refusal that is not about time.
        f->accept_stop.request_stop();
    }
    if (failed && made)
        co_await made.close();
}

task<void> confirm_accepted(std::shared_ptr<formation> f, cordma::connection c, std::stop_token token) {
    auto core = f->core;
    std::string who = c.peer();
    bool refused = false;
    try {
        handshake hs(core, c);
        hello h = co_await hs.receive_hello(f->deadline, token);
        if (h.from < core->rank())
            throw std::runtime_error("rank " + std::to_string(h.from) + " is lower: this rank connects to it");
        if (core->has_link(h.from))
            throw std::runtime_error("rank " + std::to_string(h.from) + " is already connected");
        co_await hs.send_hello(h.from);
        core->set_link(h.from, hs.make_link(h));
        if (++f->higher_linked == core->size() - 1 - core->rank())
            f->accept_stop.request_stop();
    } catch (const operation_cancelled&) {
        refused = true;
    } catch (const std::exception& e) {
        refused = true;
        detail::logf(log_level::warning, "cordma: group rank %d: refused a connection from %s: %s", core->rank(),
                     who.c_str(), e.what());
    }
    if (refused)
        co_await c.close();
}

}  // namespace

task<void> form_mesh(std::shared_ptr<group_core> core, listener incoming, clock::time_point deadline) {
    auto f = std::make_shared<formation>();
    f->core = core;
    f->deadline = deadline;
    std::stop_source deadline_stop;
    auto timer = core->event_listener()->call_after(left_until(deadline), [deadline_stop, accept = f->accept_stop]() mutable {
        deadline_stop.request_stop();
        accept.request_stop();
    });
    int higher = core->size() - 1 - core->rank();
    if (higher == 0)
        f->accept_stop.request_stop();

    task_group handshakes;
    for (int r = 0; r < core->rank(); ++r)
        handshakes.spawn(connect_to(f, core->builder(), r, deadline_stop.get_token()));
    std::stop_token accept_token = f->accept_stop.get_token();
    while (!accept_token.stop_requested()) {
        std::optional<cordma::connection> c;
        try {
            c = co_await incoming.accept(accept_token);
        } catch (const operation_cancelled&) {
            break;
        } catch (const std::exception& e) {
            detail::logf(log_level::error, "cordma: group rank %d: accept failed: %s", core->rank(), e.what());
            continue;
        }
        handshakes.spawn(confirm_accepted(f, std::move(*c), deadline_stop.get_token()));
    }
    co_await handshakes.join();
    timer->cancel();
    incoming.close();

    std::vector<int> missing;
    std::string why;
    for (int r = 0; r < core->size(); ++r) {
        if (r == core->rank() || core->has_link(r))
            continue;
        missing.push_back(r);
        auto it = f->failures.find(r);
        why += "; " + core->rank_name(r) + (it != f->failures.end() ? " failed, " + it->second
                                                                      : " never connected to this rank");
    }
    if (!missing.empty()) {
        bool timed_out = deadline_stop.stop_requested() || clock::now() >= deadline;
        throw group_error(timed_out ? std::errc::timed_out : std::errc::connection_refused,
                          "cordma::group::form (" + core->options().describe() + ")" +
                              (timed_out ? " timed out after " + std::to_string(core->options().formation_timeout.count()) +
                                               " ms (group_options::formation_timeout)"
                                         : " could not form") +
                              why,
                          std::move(missing));
    }
}

std::string device_ipv4(cordma::builder& b) {
    auto device = b.event_listener()->device();
    std::uint8_t port = b.settings().port != 0 ? b.settings().port : device->first_active_port();
    int index = device->find_gid_index(port, AF_INET);
    ibv_gid gid = device->query_gid(port, index);
    const unsigned char* raw = gid.raw;
    return std::to_string(raw[12]) + "." + std::to_string(raw[13]) + "." + std::to_string(raw[14]) + "." +
           std::to_string(raw[15]);
}

}  // namespace cordma::detail
