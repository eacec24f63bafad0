// cordma::rpc::blocking_server: an rpc::server, its builder and its listener
// made in the one order that works (server first, then listen), handlers
// run on a handler_pool through server_options::executor, and run() as
// sync_wait(serve) with a stop_source that stop() and signal_stop trigger.
#include <cordma/rpc_blocking.hpp>

#include <optional>
#include <stdexcept>
#include <stop_token>

#include <cordma/listener.hpp>
#include <cordma/sync_wait.hpp>

#include "rpc/handler_pool.hpp"
#include "rpc/signal_stop.hpp"

namespace cordma::rpc {

blocking_handler::~blocking_handler() = default;

namespace {

// The trace of the call the handler on this thread is answering.
thread_local trace_id handler_trace{};

// Sets handler_trace while a handler runs (restored after: a handler run
// inline on the event listener thread may be nested in another's turn).
class trace_scope {
public:
    explicit trace_scope(const trace_id& t) noexcept : saved_(handler_trace) { handler_trace = t; }
    ~trace_scope() { handler_trace = saved_; }
    trace_scope(const trace_scope&) = delete;
    trace_scope& operator=(const trace_scope&) = delete;

private:
    trace_id saved_;
};

// Coroutines taking everything by value: the frame owns what it uses, so
// nothing dangles however long the call waits for a thread (a coroutine
// lambda's captures live in the lambda, not in the frame).
task<std::vector<std::byte>> call_handler(blocking_handler* h, request r) {
    trace_scope scope(r.trace());
    co_return h->handle(r.method(), r.bytes());
}
task<std::vector<std::byte>> call_function(std::shared_ptr<const blocking_function> f, request r) {
    trace_scope scope(r.trace());
    co_return (*f)(r.bytes());
}

const blocking_server_options& checked(const blocking_server_options& o) {
    if (o.threads > 256)
        throw std::invalid_argument("cordma::rpc::blocking_server: blocking_server_options::threads = " +
                                    std::to_string(o.threads) + " is out of range (0 to 256)");
    if (o.rpc.executor)
        throw std::invalid_argument("cordma::rpc::blocking_server: blocking_server_options::rpc.executor is set; "
                                    "the server runs handlers on its own threads (blocking_server_options::threads)");
    return o;
}

server_options with_executor(server_options o, detail::handler_pool* pool) {
    if (pool != nullptr)
        o.executor = [pool](std::function<void()> f) { pool->post(std::move(f)); };
    return o;
}

}  // namespace

trace_id current_trace() noexcept { return handler_trace; }

// Members in the order they must be made and (reversed) destroyed: the
// server shuts its clients down before the pool finishes the calls still
// queued, and both go before the builder's event listener.
struct blocking_server::state {
    state(builder b, std::string_view address, blocking_handler* handler, const blocking_server_options& o)
        : b(std::move(b)),
          options(checked(o)),
          pool(options.threads > 0 ? std::make_unique<detail::handler_pool>(options.threads) : nullptr),
          server(this->b, with_executor(options.rpc, pool.get())) {
        if (handler != nullptr)
            server.handle_any("handler", [handler](request r) { return call_handler(handler, r); });
        l = this->b.listen(address);  // after the server: see server::serve
    }

    builder b;
    blocking_server_options options;
    std::unique_ptr<detail::handler_pool> pool;
    rpc::server server;
    listener l;
    std::stop_source stop;
    std::atomic<int> stopped_by{0};
    std::atomic<bool> ran{false};
};

blocking_server::blocking_server(std::string_view address, blocking_handler& handler, blocking_server_options options)
    : state_(std::make_unique<state>(builder{}, address, &handler, options)) {}

blocking_server::blocking_server(std::string_view address, blocking_server_options options)
    : state_(std::make_unique<state>(builder{}, address, nullptr, options)) {}

blocking_server::blocking_server(builder b, std::string_view address, blocking_handler& handler,
                                 blocking_server_options options)
    : state_(std::make_unique<state>(std::move(b), address, &handler, options)) {}

blocking_server::blocking_server(builder b, std::string_view address, blocking_server_options options)
    : state_(std::make_unique<state>(std::move(b), address, nullptr, options)) {}

blocking_server::~blocking_server() {
    state_->stop.request_stop();
    state_->l.close();
}

void blocking_server::handle(std::uint32_t method, std::string name, blocking_function f) {
    if (!f)
        throw std::invalid_argument("cordma::rpc::blocking_server::handle(" + std::to_string(method) + ", \"" + name +
                                    "\"): the function is empty");
    auto shared = std::make_shared<const blocking_function>(std::move(f));
    state_->server.handle(method, std::move(name), [shared](request r) { return call_function(shared, r); });
}

const std::string& blocking_server::address() const noexcept { return state_->l.address(); }

void blocking_server::run() {
    state& s = *state_;
    if (s.b.event_listener()->running_in_this_thread())
        throw std::logic_error("cordma::rpc::blocking_server::run on the event listener thread would wait for itself");
    if (s.ran.exchange(true))
        throw std::logic_error("cordma::rpc::blocking_server::run: it ran already (it serves once; make a new "
                               "server to serve again)");
    std::optional<detail::signal_stop> signals;
    if (s.options.handle_signals)
        signals.emplace([&s](int signal) {
            int none = 0;
            s.stopped_by.compare_exchange_strong(none, signal);
            s.stop.request_stop();
        });
    sync_wait(s.server.serve(s.l, s.stop.get_token()));
}

void blocking_server::stop() noexcept { state_->stop.request_stop(); }

int blocking_server::stopped_by_signal() const noexcept { return state_->stopped_by.load(); }

rpc::server& blocking_server::server() noexcept { return state_->server; }

}  // namespace cordma::rpc
