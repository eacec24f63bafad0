#include "connect/tcp/tcp_service.hpp"
#include "log/logf.hpp"

#include <cstdio>
#include <exception>
#include <mutex>

namespace cordma::detail {

tcp_service::tcp_service() : context_(std::make_shared<asio::io_context>()), work_(asio::make_work_guard(*context_)) {
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
