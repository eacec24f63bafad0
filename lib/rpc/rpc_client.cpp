// cordma::rpc::client, the public handle: connect (the rpc hello both
// ways, in the connection's private data), and the calls forwarded to the
// state (lib/rpc/client_state.hpp).
#include "rpc/client_state.hpp"

#include "connect/ready_hook.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>

#include <cordma/shared_receive_queue.hpp>
#include <cordma/sync_wait.hpp>
#include <cordma/task_group.hpp>

namespace cordma::rpc::detail {

namespace {

void check_options(const client_options& o) {
    auto bad = [](const std::string& what) {
        throw std::invalid_argument("cordma::rpc::client::connect: client_options::" + what);
    };
    if (o.eager_size < 64 || o.eager_size > (std::size_t(1) << 20))
        bad("eager_size = " + std::to_string(o.eager_size) + " is out of range (64 B to 1 MiB)");
    if (o.deadline.count() <= 0)
        bad("deadline = " + std::to_string(o.deadline.count()) + " ms: it must be positive");
    if (o.max_response == 0)
        bad("max_response = 0: no response could be accepted");
}

}  // namespace

}  // namespace cordma::rpc::detail

namespace cordma::rpc {

namespace wire = cordma::detail::rpc_wire;

task<client> client::connect(builder b, std::string address, client_options options) {
    detail::check_options(options);
    wire::header hello;
    hello.type = wire::frame::hello;
    hello.code = wire::version;
    // Elastic receives: small until the server asks them to grow
    // (rpc_wire.hpp); with an eager size that small already, fixed.
    std::size_t small = wire::small_receive - wire::header_size;
    hello.size = std::min(options.eager_size, small);
    hello.rkey = options.eager_size > small ? static_cast<std::uint32_t>(options.eager_size) : 0;
    hello.addr = options.max_response;
    std::array<std::byte, wire::header_size> bytes{};
    wire::encode(hello, bytes);
    b.agent(false);
    b.private_data(std::span<const std::byte>(bytes));
    b.shared_receives(cordma::shared_receive_queue{});
    // A late repost (this thread starved of CPU) is retried after 0.64 ms
    // rather than 655.
    if (b.settings().min_rnr_timer == 0)
        b.min_rnr_timer(12);
    // The server sends first (its credits) as soon as it sees the
    // connection established, so the receives are posted before this side
    // says it is (the ready hook): its first frame never meets a
    // receiver-not-ready NAK.
    std::shared_ptr<detail::client_state> state;
    auto ready = [&](const cordma::connection& c) {
        std::string why;
        std::optional<wire::header> server_hello;
        auto data = c.peer_private_data();
        if (data.size() >= wire::header_size)
            server_hello = wire::decode(data.first(wire::header_size), why);
        else
            why = "its accept carries no rpc hello";
        if (server_hello && (server_hello->type != wire::frame::hello ||
                             (server_hello->code & 0xffff) != wire::version || server_hello->size < 64 ||
                             server_hello->addr == 0)) {
            why = std::string("its hello is a ") + wire::name(server_hello->type) + " frame of version " +
                  std::to_string(server_hello->code & 0xffff);
            server_hello.reset();
        }
        if (!server_hello)
            throw rpc_error(rpc_errc::protocol,
                            "cordma::rpc::client::connect(" + address + "): not a cordma rpc server: " + why);
        state = std::make_shared<detail::client_state>(b, options, c, *server_hello);
        state->start();
    };
    co_await cordma::detail::builder_access::connect(b, address, ready);
    co_return client(std::move(state));
}

client& client::operator=(client&& other) noexcept {
    if (this != &other) {
        drop();
        state_ = std::move(other.state_);
    }
    return *this;
}

client::~client() { drop(); }

void client::drop() noexcept {
    if (!state_)
        return;
    // Closed as close() does, in the background: calls still waiting fail
    // (cancelled), and the server is told (a graceful disconnect).
    auto state = std::move(state_);
    try {
        spawn_detached(state->close("the client was destroyed"), [](std::exception_ptr) {});
    } catch (...) {
        state->shut_down(rpc_errc::cancelled, "the client was destroyed");
    }
}

detail::client_state& client::checked(const char* call) const {
    if (!state_)
        throw std::logic_error(std::string("cordma::rpc::client::") + call + " on an empty client handle");
    return *state_;
}

task<std::vector<std::byte>> client::call(std::uint32_t method, std::span<const std::byte> request,
                                          call_options options) {
    auto state = state_;
    checked("call");
    // The call lives in this frame (one coroutine fewer than a vector
    // returned from the state's own: each costs a cached frame).
    detail::pending_call c;
    co_await state->run(c, method, request, std::move(options));
    co_return std::move(c.response);
}

task<std::size_t> client::call_into(std::uint32_t method, std::span<const std::byte> request,
                                   std::span<std::byte> response, call_options options) {
    auto state = state_;
    checked("call_into");
    detail::pending_call c;
    c.into = response;
    c.into_mode = true;
    co_await state->run(c, method, request, std::move(options));
    co_return c.size;
}

std::vector<std::byte> client::call_sync(std::uint32_t method, std::span<const std::byte> request,
                                         call_options options) {
    auto& state = checked("call_sync");
    if (state.event_listener()->running_in_this_thread())
        throw std::logic_error("cordma::rpc::client::call_sync on the event listener thread would wait for "
                               "itself: co_await call() there");
    return sync_wait(call(method, request, std::move(options)));
}

task<void> client::close() {
    auto state = state_;
    checked("close");
    co_await state->close();
}

const std::string& client::peer() const { return checked("peer").peer(); }
std::uint32_t client::credits() const { return checked("credits").credits(); }
const cordma::connection& client::connection() const { return checked("connection").connection(); }

client_metrics client::metrics() const { return checked("metrics").metrics(); }

}  // namespace cordma::rpc
