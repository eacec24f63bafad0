#pragma once
// The threads a blocking_server runs its handlers on: a queue of functions
// (each resumes a handler's coroutine, which calls the blocking handler and
// then hops back to the event listener thread to answer).

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cordma::rpc::detail {

class handler_pool {
public:
    /// Starts `threads` threads (at least 1).
    explicit handler_pool(std::size_t threads);
    /// Runs what is queued still, then joins the threads.
    ~handler_pool();
    handler_pool(const handler_pool&) = delete;
    handler_pool& operator=(const handler_pool&) = delete;

    /// Queues `f` to run on one of the threads. Thread-safe.
    void post(std::function<void()> f);

private:
    void work();
    void stop_and_join() noexcept;

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> queue_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace cordma::rpc::detail
