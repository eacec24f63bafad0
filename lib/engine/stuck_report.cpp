// stuck_report.hpp: asking each event listener, on its own thread, for its
// connections' pending operations; merging; the report as text.
#include <cordma/stuck_report.hpp>

#include <cordma/event_listener.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "core/coarse_clock.hpp"
#include "engine/connection_registry.hpp"
#include "engine/process_metrics.hpp"

namespace cordma {

namespace {

// Oldest first, `limit` of them kept (stable: equal ages keep posting order).
void keep_oldest(std::vector<pending_operation>& ops, std::size_t limit) {
    std::stable_sort(ops.begin(), ops.end(),
                     [](const pending_operation& a, const pending_operation& b) { return a.age > b.age; });
    if (ops.size() > limit)
        ops.resize(limit);
}

std::string with_commas(std::uint64_t n) {
    std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i != 0 && (digits.size() - i) % 3 == 0)
            out += ',';
        out += digits[i];
    }
    return out;
}

}  // namespace

const char* describe(pending_stage stage) noexcept {
    switch (stage) {
    case pending_stage::send_queue_full: return "waiting for a send-queue entry";
    case pending_stage::receive_queue_full: return "waiting for a receive-queue entry";
    case pending_stage::posted: return "posted, waiting for its completion";
    case pending_stage::receive_posted: return "posted, waiting for the peer's message";
    case pending_stage::rpc_call: return "waiting for its answer";
    case pending_stage::rpc_handler: return "being served";
    case pending_stage::agent_call: return "an agent call";
    case pending_stage::collective: return "waiting for the other ranks";
    case pending_stage::stream_read: return "waiting for the peer's data";
    case pending_stage::stream_write: return "waiting for the reader (its window, or its read of a large write)";
    }
    return "unknown";
}

stuck_report event_listener::stuck(std::size_t limit, std::chrono::milliseconds wait) {
    auto collect = [this, limit] {
        stuck_report r;
        connections_->collect_pending(detail::coarse_clock::now_ms(), r.oldest);
        r.pending = r.oldest.size();
        keep_oldest(r.oldest, limit);
        return r;
    };
    if (running_in_this_thread())
        return collect();
    struct answer {
        std::mutex mutex;
        std::condition_variable ready;
        bool done = false;
        stuck_report report;
    };
    auto box = std::make_shared<answer>();
    post([box, collect] {
        stuck_report r = collect();
        std::lock_guard lock(box->mutex);
        box->report = std::move(r);
        box->done = true;
        box->ready.notify_all();
    });
    std::unique_lock lock(box->mutex);
    if (!box->ready.wait_for(lock, wait, [&] { return box->done; })) {
        stuck_report r;
        r.unanswered.push_back("the event listener on " + device_->name());
        return r;
    }
    return std::move(box->report);
}

stuck_report process_stuck(std::size_t limit, std::chrono::milliseconds wait) {
    stuck_report all;
    for (const auto& l : detail::process_event_listeners()) {
        stuck_report one = l->stuck(limit, wait);
        all.pending += one.pending;
        for (pending_operation& p : one.oldest)
            all.oldest.push_back(std::move(p));
        for (std::string& u : one.unanswered)
            all.unanswered.push_back(std::move(u));
    }
    keep_oldest(all.oldest, limit);
    return all;
}

std::string to_text(const stuck_report& report) {
    std::string out;
    if (report.pending == 0)
        out += "cordma: no operation pending\n";
    else
        out += "cordma: " + with_commas(report.pending) + " operation" + (report.pending == 1 ? "" : "s") +
               " pending; the oldest " + std::to_string(report.oldest.size()) + ":\n";
    for (const pending_operation& p : report.oldest) {
        std::string ms = with_commas(static_cast<std::uint64_t>(p.age.count()));
        out += std::string(ms.size() < 9 ? 9 - ms.size() : 0, ' ') + ms + " ms  ";
        if (p.stage == pending_stage::agent_call) {
            // what: "request_remote_mr, waiting for the peer's answer".
            auto comma = p.what.find(", ");
            out += p.what.substr(0, comma) + (p.bytes != 0 ? " of " + with_commas(p.bytes) + " B" : std::string()) +
                   ", to " + p.peer + " (qp " + std::to_string(p.qp_num) + ", " + p.role + "): " +
                   (comma == std::string::npos ? describe(p.stage) : p.what.substr(comma + 2)) + "\n";
        } else if (!p.what.empty())
            out += p.what + ", " + (p.bytes != 0 ? with_commas(p.bytes) + " B, " : std::string()) +
                   (p.stage == pending_stage::stream_read || p.stage == pending_stage::rpc_handler ? "from " : "to ") +
                   p.peer + ": " + describe(p.stage) + (p.trace.empty() ? "" : ", trace " + p.trace.to_string()) +
                   "\n";
        else
            out += std::string(name(p.kind)) + " " + with_commas(p.bytes) + " B, " +
                   (p.kind == operation_kind::recv ? "from " : "to ") + p.peer + " (qp " + std::to_string(p.qp_num) +
                   ", " + p.role + "): " + describe(p.stage) + "\n";
    }
    for (const std::string& u : report.unanswered)
        out += "cordma: " + u +
               " did not answer in time: its thread is busy (a handler or callback that blocks it?); its "
               "operations are not in this report\n";
    return out;
}

}  // namespace cordma
