// cordma::group: forming (options checked, endpoints from the host list or
// a launcher, then the mesh) and the handle's accessors. The collectives
// live in collectives/, one file each.
#include <cordma/group.hpp>

#include <exception>
#include <functional>
#include <stdexcept>
#include <thread>

#include <cordma/error.hpp>

#include "connect/qp_settings.hpp"
#include "group/bootstrap/group_bootstrap.hpp"
#include "group/group_core.hpp"
#include "group/group_formation.hpp"
#include "link/link_hello.hpp"
#include "link/peer_link.hpp"

namespace cordma {

using detail::group_core;
using clock = std::chrono::steady_clock;

namespace {

void check_options(const builder& b, const group_options& o) {
    auto bad = [](const std::string& what) {
        throw std::invalid_argument("cordma::group::form: group_options::" + what);
    };
    if (o.eager_size < 64 || o.eager_size > (1u << 20))
        bad("eager_size is " + std::to_string(o.eager_size) + " bytes; it must be 64 B to 1 MiB");
    std::uint32_t depth = b.settings().capacity.max_recv_wr;
    std::uint32_t most = detail::peer_link::largest_window(depth);
    if (o.window < 2 || o.window > most)
        bad("window is " + std::to_string(o.window) + "; it must be 2 to " + std::to_string(most) +
            " (each link keeps 2 * window + 4 receives posted: raise builder::recv_queue_depth, now " +
            std::to_string(depth) + ", for more)");
    if (o.formation_timeout.count() <= 0)
        bad("formation_timeout must be positive");
    if (o.peer_timeout < std::chrono::seconds(1))
        bad("peer_timeout is " + std::to_string(o.peer_timeout.count()) + " ms; it must be at least 1 s");
    if (o.operation_timeout.count() <= 0)
        bad("operation_timeout must be positive (a year or more means none)");
    if (!b.settings().with_agent)
        throw std::invalid_argument("cordma::group::form: the builder makes connections without the agent "
                                    "(builder::agent(false)); a group's connections carry one");
    if (!o.bootstrap) {
        if (o.hosts.empty())
            bad("hosts is empty and no launcher was found: give every rank's endpoint, or use from_environment()");
        if (o.rank < 0 || static_cast<std::size_t>(o.rank) >= o.hosts.size())
            bad("rank is " + std::to_string(o.rank) + ", not a rank of the " + std::to_string(o.hosts.size()) +
                " hosts");
    }
}

/// Runs a blocking call (a launcher's endpoint exchange) on a thread of its
/// own and resumes on the event listener thread when it returns.
struct blocking_call {
    std::function<void()> fn;
    std::shared_ptr<event_listener> el;
    std::exception_ptr error;
    std::thread thread;

    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        thread = std::thread([this, h] {
            try {
                fn();
            } catch (...) {
                error = std::current_exception();
            }
            el->post([h] { h.resume(); });
        });
    }
    void await_resume() {
        thread.join();
        if (error)
            std::rethrow_exception(error);
    }
};

blocking_call run_blocking(std::function<void()> fn, std::shared_ptr<event_listener> el) {
    return blocking_call{std::move(fn), std::move(el), nullptr, {}};
}

}  // namespace

task<group> group::form(builder b, group_options options) {
    check_options(b, options);
    detail::wait_for_receivers(b);
    auto deadline = clock::now() + options.formation_timeout;
    auto el = b.event_listener();
    int rank = options.rank;
    std::vector<std::string> endpoints;
    cordma::listener incoming;
    if (options.bootstrap) {
        rank = options.bootstrap->rank();
        std::string address = options.listen_address;
        if (address.empty())
            address = detail::device_ipv4(b);
        if (address.find(':') == std::string::npos)
            address += ":0";
        incoming = b.listen(address);
        std::string mine = incoming.address();
        auto bootstrap = options.bootstrap;
        // Named, not a temporary: g++ 12 destroys some temporary awaiters
        // in a co_await twice (this one owns a thread and a function).
        blocking_call exchange = run_blocking(
            [&endpoints, bootstrap, mine, deadline] { endpoints = bootstrap->exchange(mine, deadline); },
            el);
        co_await exchange;
        if (endpoints.size() != static_cast<std::size_t>(bootstrap->size()) || rank < 0 ||
            static_cast<std::size_t>(rank) >= endpoints.size())
            throw std::logic_error("cordma::group::form: " + bootstrap->describe() + " returned " +
                                   std::to_string(endpoints.size()) + " endpoints (internal error)");
    } else {
        endpoints = options.hosts;
        incoming = b.listen(endpoints[static_cast<std::size_t>(rank)]);
    }
    if (!el->running_in_this_thread())
        co_await el->schedule();
    auto core = std::make_shared<group_core>(b, std::move(options), rank, std::move(endpoints));
    co_await detail::form_mesh(core, std::move(incoming), deadline);
    co_return group(core);
}

detail::group_core& group::checked(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("cordma::group::") + call + " on an empty group handle");
    return *state_;
}

int group::rank() const { return checked("rank").rank(); }
int group::size() const { return checked("size").size(); }

const cordma::connection& group::connection(int r) const {
    auto& core = checked("connection");
    if (r < 0 || r >= core.size() || r == core.rank())
        throw std::out_of_range("cordma::group::connection(" + std::to_string(r) + "): rank " +
                                std::to_string(core.rank()) + " has connections to ranks 0.." +
                                std::to_string(core.size() - 1) + " except itself");
    return core.link(r).connection();
}

const std::string& group::endpoint(int r) const {
    auto& core = checked("endpoint");
    if (r < 0 || r >= core.size())
        throw std::out_of_range("cordma::group::endpoint(" + std::to_string(r) + "): the group has ranks 0.." +
                                std::to_string(core.size() - 1));
    return core.endpoint(r);
}

local_mr group::allocate(std::size_t size) const {
    return checked("allocate").builder().pool()->allocate(size);
}

group_metrics group::metrics() const { return checked("metrics").tally().read(); }

task<void> group::close() {
    if (!state_)
        co_return;
    auto core = state_;
    co_await core->close();
}

}  // namespace cordma
