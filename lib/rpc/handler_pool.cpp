// cordma::rpc::detail::handler_pool: a plain mutex-and-condition queue. A
// handler call costs two thread hops anyway (there and back); the queue's
// lock is not what a blocking handler waits for.
#include "rpc/handler_pool.hpp"

namespace cordma::rpc::detail {

handler_pool::handler_pool(std::size_t threads) {
    threads_.reserve(threads);
    try {
        for (std::size_t i = 0; i < threads; ++i)
            threads_.emplace_back([this] { work(); });
    } catch (...) {
        stop_and_join();
        throw;
    }
}

handler_pool::~handler_pool() { stop_and_join(); }

void handler_pool::stop_and_join() noexcept {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_)
        if (t.joinable())
            t.join();
    threads_.clear();
}

void handler_pool::post(std::function<void()> f) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(f));
    }
    ready_.notify_one();
}

void handler_pool::work() {
    for (;;) {
        std::function<void()> f;
        {
            std::unique_lock lock(mutex_);
            ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            // Queued calls run even when stopping: each is a coroutine that
            // must resume to end (it answers nobody once the server is shut).
            if (queue_.empty())
                return;
            f = std::move(queue_.front());
            queue_.pop_front();
        }
        f();
    }
}

}  // namespace cordma::rpc::detail
