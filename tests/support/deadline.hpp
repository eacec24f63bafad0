#pragma once
// A std::stop_token that is stopped when a time limit passes: for waits a
// test must bound (an accept for a peer process that may never connect), so
// that they fail with operation_cancelled instead of hanging the suite.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

namespace cordma::test {

class deadline {
public:
    explicit deadline(std::chrono::seconds limit)
        : thread_([this, limit] {
              std::unique_lock lock(mutex_);
              if (!changed_.wait_for(lock, limit, [this] { return over_; }))
                  source_.request_stop();
          }) {}
    deadline(const deadline&) = delete;
    deadline& operator=(const deadline&) = delete;
    ~deadline() {
        {
            std::lock_guard lock(mutex_);
            over_ = true;
        }
        changed_.notify_all();
        thread_.join();
    }

    std::stop_token token() const { return source_.get_token(); }

private:
    std::stop_source source_;
    std::mutex mutex_;
    std::condition_variable changed_;
    bool over_ = false;
    std::thread thread_;  // last: it uses the members above
};

}  // namespace cordma::test
