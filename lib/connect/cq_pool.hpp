#pragma once
/// The completion queues of one direction (sends, or receives) that the
/// queue pairs of one runtime share. A QP takes room on one CQ for every work
/// request it may have outstanding (a CQ that overflows loses completions);
/// a CQ grows (ibv_resize_cq) as QPs arrive, up to the device's max_cqe, and
/// past that the pool makes another, so the number of connections a builder
/// holds is bounded by memory, not by the size of one CQ. A CQ beyond the
/// first goes once no QP uses it. Touched only on the event listener thread.

#include <memory>
#include <vector>

#include <cordma/completion_queue.hpp>
#include <cordma/event_listener.hpp>

namespace cordma::detail {

class cq_pool {
public:
    /// `what` names the direction in errors ("send", "receive"). Makes the
    /// first CQ (`first_entries`, capped at the device's max_cqe) at once.
    /// The CQs are `device`'s (the event listener's own, or another rail's),
    /// their completions run on `el`.
    cq_pool(std::shared_ptr<cordma::event_listener> el, std::shared_ptr<device_context> device, int first_entries,
            const char* what);

    /// A CQ with room for `entries` more completions, taken. Throws
    /// std::invalid_argument when `entries` is more than one CQ of the
    /// device holds, and verbs_error when the device cannot make another.
    std::shared_ptr<completion_queue> take(int entries);
    /// Gives back room taken from `cq` (no-op for 0 entries).
    void give_back(const completion_queue* cq, int entries) noexcept;

private:
    struct share {
        std::shared_ptr<completion_queue> cq;
        int in_use = 0;
    };
    std::shared_ptr<cordma::event_listener> el_;
    std::shared_ptr<device_context> device_;
    int max_entries_;
    int first_entries_;
    const char* what_;
    std::vector<share> shares_;
};

}  // namespace cordma::detail
