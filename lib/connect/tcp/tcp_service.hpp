#pragma once
/// The io_context thread of the TCP endpoint exchange, one per runtime
/// (runtime::tcp). How its handlers and the event listener thread share the
/// exchange's objects (threads, lifetimes): see tcp_io.hpp.

#include <memory>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include "connect/runtime.hpp"

namespace cordma::detail {

/// The io_context thread of one runtime. Made on first use, destroyed with
/// the runtime: stops the io_context and joins the thread; operations still
/// pending are dropped with the io_context (their handlers are destroyed, not
/// called).
class tcp_service {
public:
    tcp_service();
    ~tcp_service();

    tcp_service(const tcp_service&) = delete;
    tcp_service& operator=(const tcp_service&) = delete;

    asio::io_context& context() noexcept { return *context_; }

    /// The runtime's service, started on first use. Any thread.
    static tcp_service& of(runtime& rt);

private:
    std::shared_ptr<asio::io_context> context_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

}  // namespace cordma::detail
