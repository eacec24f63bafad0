// cordma::rpc::server's fair credits: on the shared receive queue every
// credit a client holds stands for one of the SRQ's receives, so the
// credits granted in all never pass the budget (server_options::receives)
// and the SRQ never runs dry, however many clients there are. Each client
// may hold its share of the budget (at most server_options::credits, at
// least 1). Credits go to clients waiting for them in turn; a credit that
// comes back from a client over its share (or, with more clients than
// receives, from any client while others wait) is kept for the next one
// waiting; and clients that sit on unused credits are asked for them.
// docs/rpc.md, "Credits", describes it for users.
#include "rpc/server_state.hpp"

#include <chrono>

namespace cordma::rpc::detail {

namespace {

/// How often idle clients are asked again for their unused credits while
/// others wait and the budget is spent.
constexpr std::chrono::milliseconds reclaim_period{100};
/// With more clients than receives, a client's last credit is asked for
/// only once it has sent no request for this many looks in a row (about
/// 1 s): the credits go round the clients that call, not through the
/// idle ones and back every 100 ms.
constexpr std::uint32_t idle_looks_before_last_credit = 10;

}  // namespace

std::uint32_t server_state::fair_share() const noexcept {
    std::uint64_t share = budget_ / std::max<std::size_t>(sessions_.size(), 1);
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(share, 1, options_.credits));
}

bool server_state::scarce() const noexcept {
    return budget_ < sessions_.size();
}

void server_state::want(const std::shared_ptr<session>& s) {
    if (!srq_ || s->gone || s->wanting || s->granted >= fair_share())
        return;
    s->wanting = true;
    wanting_.push_back(s);
}

void server_state::top_up() {
    if (!srq_ || shut_)
        return;
    while (granted_total_ < budget_ && !wanting_.empty()) {
        auto s = std::move(wanting_.front());
        wanting_.pop_front();
        s->wanting = false;
        std::uint32_t share = fair_share();
        if (s->gone || s->granted >= share)
            continue;
        auto give = static_cast<std::uint32_t>(std::min<std::uint64_t>(share - s->granted, budget_ - granted_total_));
        s->granted += give;
        granted_total_ += give;
        s->unreturned += give;
        want(s);  // still below its share: in line again, behind the others
        if (s->active == 0)
            send_credits(s);  // else the response about to go carries them
    }
    if (!wanting_.empty())
        reclaim();
}

void server_state::credit_back(const std::shared_ptr<session>& s) {
    --s->charged;
    s->asked_back = false;  // it was using its credits: ask again if need be
    // More clients than receives: no one may keep a credit while another
    // waits. Otherwise only one over its share gives way.
    if (!wanting_.empty() && (scarce() || s->granted > fair_share())) {
        --s->granted;
        --granted_total_;
        want(s);
        top_up();
        return;
    }
    ++s->unreturned;
}

void server_state::reclaim() {
    if (reclaim_timer_ || shut_)
        return;  // asked a moment ago: the timer asks again
    std::uint32_t share = fair_share();
    std::size_t need = 0;  // credits the clients in line lack
    for (const auto& w : wanting_)
        need += w->gone || w->granted >= share ? 0 : share - w->granted;
    if (need == 0 || granted_total_ < budget_)
        return;
    std::uint32_t keep = scarce() ? 0 : share;  // share is at least 1: keep 0 means scarce
    for (auto& [qp, s] : sessions_) {
        if (s->requests != s->requests_seen) {
            s->requests_seen = s->requests;
            s->idle_looks = 0;
        } else {
            ++s->idle_looks;
        }
        if (need == 0 || s->gone || s->wanting || s->asked_back || s->granted <= keep)
            continue;
        if (keep == 0 && s->idle_looks < idle_looks_before_last_credit)
            continue;
        std::uint32_t unused = s->granted - s->charged;
        auto ask = static_cast<std::uint32_t>(std::min<std::size_t>({s->granted - keep, unused, need}));
        if (ask == 0)
            continue;
        s->asked_back = true;
        need -= ask;
        send_credits(s, ask);
    }
    std::weak_ptr<server_state> weak = weak_from_this();
    reclaim_timer_ = event_listener_->call_after(reclaim_period, [weak] {
        auto self = weak.lock();
        if (!self || self->shut_)
            return;
        self->reclaim_timer_.reset();
        self->top_up();  // and, if clients still wait, reclaim() again
    });
}

void server_state::send_credits(const std::shared_ptr<session>& s, std::uint32_t ask_back) {
    spawn_detached(send_frame(s, {.type = wire::frame::credit, .size = ask_back}, {}), [](std::exception_ptr) {});
}

}  // namespace cordma::rpc::detail
