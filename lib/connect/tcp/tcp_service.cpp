#include "connect/tcp/tcp_service.hpp"
#include "engine/exit_wait.hpp"
#include "log/logf.hpp"

#include <cstdio>
#include <exception>
#include <mutex>

#include <asio/error.hpp>

namespace cordma::detail {

namespace {
/// Set on an io thread whose service was destroyed on it (so detached).
thread_local bool detached_io_thread = false;
}  // namespace

tcp_service::tcp_service() : context_(std::make_shared<asio::io_context>()), work_(asio::make_work_guard(*context_)) {
    // An io thread's teardown compares error codes of asio's categories:
    // exit must wait for it before those categories go.
    static const bool waits = [] {
        (void)asio::system_category();
        (void)asio::error::get_misc_category();
        (void)asio::error::get_netdb_category();
        (void)asio::error::get_addrinfo_category();
        exit_wait_after_statics();
        return true;
    }();
    (void)waits;
    // The thread shares the io_context, so a (never expected) last
    // reference dropped on the io thread itself can detach safely.
    thread_ = std::thread([context = context_]() mutable {
        for (;;) {
            try {
                context->run();
                break;
            } catch (const std::exception& e) {
                detail::logf(log_level::error, "cordma: TCP endpoint exchange: an io handler threw: %s", e.what());
            }
        }
        // Handlers still pending go with the io_context, here; a detached
        // thread's teardown (channels, connections, the runtime they held)
        // is over only after that, and exit waits until it is.
        context.reset();
        if (detached_io_thread)
            exit_wait_end();
    });
}

tcp_service::~tcp_service() {
    work_.reset();
    context_->stop();
    if (thread_.get_id() == std::this_thread::get_id()) {
        detached_io_thread = true;
        exit_wait_begin();
        thread_.detach();
    } else {
        thread_.join();
    }
}

tcp_service& tcp_service::of(runtime& rt) {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    if (!rt.tcp)
        rt.tcp = std::make_shared<tcp_service>();
    return *rt.tcp;
}

}  // namespace cordma::detail
