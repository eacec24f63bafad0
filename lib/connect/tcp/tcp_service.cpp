#include "connect/tcp/tcp_service.hpp"
#include "engine/exit_wait.hpp"
#include "log/logf.hpp"

#include <cstdio>
#include <exception>
#include <mutex>
#include <system_error>

#include <asio/error.hpp>

namespace cordma::detail {

namespace {

// The io thread's handlers compare error codes of asio's categories
// (function-local statics, made on first use). A listener torn down on its
// own detached thread as a program returns from main stops this thread
// while exit is under way: made here first, those categories are destroyed
// only after exit has waited for that teardown (exit_wait.hpp). Without it,
// agent_asan once reported a destroyed category's vptr in the acceptor's
// aborted accept, at exit.
void make_categories_before_exit_waits() noexcept {
    static const bool made = [] {
        (void)std::system_category();
        (void)std::generic_category();
        (void)asio::error::get_misc_category();
        (void)asio::error::get_netdb_category();
        (void)asio::error::get_addrinfo_category();
        wait_at_exit_for_statics_made_so_far();
        return true;
    }();
    (void)made;
}

}  // namespace

tcp_service::tcp_service() : context_(std::make_shared<asio::io_context>()), work_(asio::make_work_guard(*context_)) {
    make_categories_before_exit_waits();
    // The thread shares the io_context, so a (never expected) last
    // reference dropped on the io thread itself can detach safely.
    thread_ = std::thread([context = context_] {
        for (;;) {
            try {
                context->run();
                return;
            } catch (const std::exception& e) {
                detail::logf(log_level::error, "cordma: TCP endpoint exchange: an io handler threw: %s", e.what());
            }
        }
    });
}

tcp_service::~tcp_service() {
    work_.reset();
    context_->stop();
    if (thread_.get_id() == std::this_thread::get_id())
        thread_.detach();
    else
        thread_.join();
}

tcp_service& tcp_service::of(runtime& rt) {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    if (!rt.tcp)
        rt.tcp = std::make_shared<tcp_service>();
    return *rt.tcp;
}

}  // namespace cordma::detail
