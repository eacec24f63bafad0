#pragma once
/// What a shared_receive_queue is underneath: the verbs SRQ, its receive
/// slots and their buffers (one registration), the connections attached to
/// it by QP number, and the connections that broke, for ended(). Messages
/// and next() are the base's (message_queue_state). Touched only on the
/// event listener thread, except the constructor and the read-only sizes.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <cordma/completion_queue.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/metrics.hpp>
#include <cordma/shared_receive_queue.hpp>
#include "engine/connection_tally.hpp"
#include "engine/counter.hpp"
#include "engine/message_queue_state.hpp"
#include "engine/waiter_queue.hpp"

struct ibv_srq;

namespace cordma::detail {

class connection_state;

class shared_receive_state final : public message_queue_state {
public:
    /// Creates the SRQ on `pd` and registers `count` buffers of
    /// `buffer_size` bytes; open() posts them. Throws as
    /// shared_receive_queue's constructor says.
    shared_receive_state(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<protection_domain> pd,
                         std::size_t count, std::size_t buffer_size);
    ~shared_receive_state() override;

    ibv_srq* srq() const noexcept { return srq_; }
    const std::shared_ptr<protection_domain>& pd() const noexcept { return pd_; }
    std::size_t size() const noexcept { return slots_.size(); }
    std::size_t buffer_size() const noexcept { return buffer_size_; }
    /// Any thread. False once the handle is closing the queue: set at once
    /// by the handle, on its own thread, so a builder asked for a connection
    /// right after the handle went refuses it (close() itself runs later, on
    /// the event listener thread).
    bool open_for_connections() const noexcept { return accepting_.load(std::memory_order_acquire); }
    void stop_accepting_connections() noexcept { accepting_.store(false, std::memory_order_release); }

    /// Event listener thread. Posts every receive.
    void open();
    /// Event listener thread. The handle is gone: pending next() and
    /// ended() fail with operation_cancelled, later messages are dropped.
    void close() noexcept;

    /// Event listener thread. A connection whose data QP receives through
    /// the SRQ (from assemble), and its going (from its state's
    /// destructor).
    void attach(std::uint32_t qp_num, const std::string& peer, std::weak_ptr<connection_state> state);
    void detach(std::uint32_t qp_num) noexcept;
    /// Event listener thread. An attached connection broke: reported by
    /// ended().
    void on_broken(std::uint32_t qp_num, const std::string& peer, const std::string& why) noexcept;

    /// Any thread.
    std::string peer_of(std::uint32_t qp_num) const;
    std::size_t connections() const;
    const std::shared_ptr<waiter_queue<ended_connection>>& ends() const noexcept { return ends_; }

    void release(work_slot* slot) noexcept override;

    /// What it counted, each counter read once (any thread; for the event
    /// listener's metrics snapshot, which lists the queue from its
    /// construction to its destruction).
    shared_receive_metrics metrics() const;
    /// Its counts alone (what metrics().counters holds), with nothing to
    /// allocate: for the registry's closed totals as it goes.
    connection_counters counted() const noexcept { return tally_.read(); }

    /// The CQ the receives complete on, whichever attached QP takes them
    /// (each has room for all of them there), set when the queue is opened.
    std::shared_ptr<completion_queue> receive_cq;
    /// Runs when the state goes (any thread): gives back the CQ room.
    std::function<void()> on_destroyed;

private:
    struct slot : work_slot {
        shared_receive_state* srq = nullptr;
    };
    struct attached {
        std::string peer;
        std::weak_ptr<connection_state> state;
    };
    static void on_complete(completion_target* target, const ibv_wc& wc) noexcept;
    void complete(slot* s, const ibv_wc& wc) noexcept;
    void post(slot* s);
    bool finished() const noexcept override { return false; }
    std::exception_ptr broken_error() const override { return nullptr; }

    std::shared_ptr<protection_domain> pd_;
    ibv_srq* srq_ = nullptr;
    std::size_t buffer_size_;
    local_mr buffers_;
    std::vector<slot> slots_;
    std::atomic<bool> accepting_{false};
    mutable std::mutex attached_mutex_;  // the map is read from any thread
    std::unordered_map<std::uint32_t, attached> attached_connections_;
    // Receives that failed before their QP's connection attached (its peer
    // sent before the accept was complete): the connection is shut down as
    // it attaches. Recent ones only (a QP number is reused later), at most
    // 256; under attached_mutex_.
    struct early_failure {
        std::string why;
        std::chrono::steady_clock::time_point when{};
    };
    static constexpr std::chrono::seconds early_failure_memory{60};
    std::unordered_map<std::uint32_t, early_failure> failed_before_attach_;
    std::shared_ptr<waiter_queue<ended_connection>> ends_;

    // metrics(): counted on the event listener thread, its receives as a
    // connection counts its own (operations[recv], completions by status).
    std::uint64_t id_;
    connection_tally tally_;
    counter ready_, fewest_ready_;
    std::uint64_t ready_now_ = 0;  // the gauges' values, kept where the loop reads them
    std::uint64_t fewest_now_ = 0;
};

/// How the library reaches inside the public handle.
struct shared_receive_access {
    static const std::shared_ptr<shared_receive_state>& state(const shared_receive_queue& q) noexcept {
        return q.state_;
    }
};

}  // namespace cordma::detail
