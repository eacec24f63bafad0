#include "group/mailbox.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include <cordma/error.hpp>
#include <cordma/group.hpp>

#include "group/group_core.hpp"

namespace cordma::detail {

namespace wire = link_wire;

mailbox::mailbox(std::weak_ptr<group_core> core, std::shared_ptr<event_listener> el, int size,
                 std::uint32_t copy_budget)
    : core_(std::move(core)),
      event_listener_(std::move(el)),
      copy_budget_(copy_budget),
      copied_(static_cast<std::size_t>(size)),
      gone_(static_cast<std::size_t>(size)),
      sent_seq_(static_cast<std::size_t>(size)) {}

bool mailbox::matches(int source, std::uint32_t tag, int from, std::uint32_t frame_tag) noexcept {
    return (source < 0 || source == from) && (tag == group::any_tag || tag == frame_tag);
}

std::string mailbox::describe_recv(int source, std::uint32_t tag) const {
    std::string s = "recv from ";
    auto core = core_.lock();
    if (source < 0)
        s += "any rank";
    else
        s += core ? core->rank_name(source) : "rank " + std::to_string(source);
    return s + (tag == group::any_tag ? ", any tag" : ", tag " + std::to_string(tag));
}

std::string mailbox::too_long(const entry& e, std::size_t room) const {
    auto core = core_.lock();
    std::string who = core ? core->rank_name(e.source) : "rank " + std::to_string(e.source);
    return (core ? core->prefix() : std::string("cordma::group: ")) + "a message of " +
           std::to_string(e.frame.header.size) + " bytes from " + who + " (tag " +
           std::to_string(e.frame.header.root) + ") is longer than this recv's " + std::to_string(room) +
           "-byte buffer; it was not taken and waits for a recv with room for it";
}

void mailbox::arrived(peer_link& from, inbound_frame frame) {
    if (failed_)
        return;  // the group is broken: the frame's receive is given back as it goes
    int src = from.rank();
    const wire::header h = frame.header;
    std::shared_ptr<waiter> taker;
    std::vector<std::shared_ptr<waiter>> refused;  // only ever filled when a buffer is too small
    for (auto it = posted_.begin(); it != posted_.end();) {
        const auto& w = *it;
        if (!matches(w->source, w->tag, src, h.root)) {
            ++it;
            continue;
        }
        if (h.size > w->room) {
            refused.push_back(w);
            it = posted_.erase(it);
            continue;
        }
        taker = w;
        posted_.erase(it);
        break;
    }
    if (taker)
        taker->got.emplace(entry{src, entry::state::held, std::move(frame), {}});
    else
        keep(from, std::move(frame));
    // Woken only now: a woken recv runs on until it next waits, and may
    // post another recv or take the frame just kept.
    for (auto& w : refused) {
        entry about{src, entry::state::held, inbound_frame{h, {}}, {}};
        w->refused = too_long(about, w->room);
        wake(w);
    }
    if (taker)
        wake(taker);
}

void mailbox::keep(peer_link& from, inbound_frame frame) {
    int src = from.rank();
    auto s = static_cast<std::size_t>(src);
    entry e{src, entry::state::held, std::move(frame), {}};
    const wire::header& h = e.frame.header;
    if (h.type == wire::frame::rts) {
        from.release(e.frame);
        e.how = entry::state::announced;
    } else if (copied_[s] < copy_budget_) {
        auto payload = wire::payload(e.frame.message.bytes(), h);
        e.bytes.assign(payload.begin(), payload.end());
        from.release(e.frame);
        e.how = entry::state::copied;
        ++copied_[s];
    }
    kept_.push_back(std::move(e));
}

task<mailbox::entry> mailbox::take(int source, std::uint32_t tag, std::size_t room, std::stop_token token) {
    auto self = shared_from_this();
    auto core = core_.lock();
    if (!core)
        throw std::logic_error("cordma::group: a recv on a group that is gone (internal error)");
    if (failed_)
        core->throw_failure();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (!matches(source, tag, it->source, it->frame.header.root))
            continue;
        if (it->frame.header.size > room)
            throw group_error(std::errc::message_size, too_long(*it, room), {});
        entry e = std::move(*it);
        kept_.erase(it);
        if (e.how == entry::state::copied)
            --copied_[static_cast<std::size_t>(e.source)];
        co_return e;
    }
    if (source >= 0 && !gone_[static_cast<std::size_t>(source)].empty())
        source_gone(source);
    if (source < 0) {
        bool anyone = false;
        for (int r = 0; r < static_cast<int>(gone_.size()); ++r)
            anyone = anyone || (r != core->rank() && gone_[static_cast<std::size_t>(r)].empty());
        if (!anyone)
            source_gone(-1);
    }
    if (token.stop_requested())
        throw operation_cancelled("group recv", describe_recv(source, tag));
    auto w = std::make_shared<waiter>(waiter{source, tag, room, {}, std::nullopt, {}, false, false, false});
    posted_.push_back(w);
    std::optional<std::stop_callback<std::function<void()>>> on_stop;
    if (token.stop_possible())
        on_stop.emplace(token, [self, w] {
            self->event_listener_->post([self, w] {
                if (w->done)
                    return;
                std::erase(self->posted_, w);
                w->cancelled = true;
                wake(w);
            });
        });
    co_await wait_for(w.get());
    on_stop.reset();
    if (w->cancelled)
        throw operation_cancelled("group recv", describe_recv(source, tag));
    if (w->failed)
        core->throw_failure();
    if (!w->refused.empty())
        throw group_error(std::errc::message_size, w->refused, {});
    co_return std::move(*w->got);
}

std::shared_ptr<mailbox::fin_wait> mailbox::expect_fin(int dest, std::uint32_t seq) {
    auto w = std::make_shared<fin_wait>(fin_wait{dest, seq, {}, false, false, false});
    fins_.push_back(w);
    return w;
}

task<void> mailbox::wait_fin(std::shared_ptr<fin_wait> w, std::stop_token token) {
    auto self = shared_from_this();
    std::optional<std::stop_callback<std::function<void()>>> on_stop;
    if (!w->done && token.stop_possible())
        on_stop.emplace(token, [self, w] {
            self->event_listener_->post([self, w] {
                if (w->done)
                    return;
                std::erase(self->fins_, w);
                w->cancelled = true;
                wake(w);
            });
        });
    co_await wait_for(w.get());
    on_stop.reset();
    if (w->cancelled)
        throw operation_cancelled("group send", "rank " + std::to_string(w->dest), "its read of the message");
    if (w->failed) {
        if (auto core = core_.lock())
            core->throw_failure();
        throw std::system_error(std::make_error_code(std::errc::connection_aborted), "cordma::group: gone");
    }
}

void mailbox::fin_arrived(peer_link& from, const wire::header& fin) {
    auto it = std::find_if(fins_.begin(), fins_.end(), [&](const std::shared_ptr<fin_wait>& w) {
        return w->dest == from.rank() && w->seq == fin.seq;
    });
    if (it == fins_.end()) {
        if (auto core = core_.lock())
            core->fail(std::errc::protocol_error,
                       from.name() + " finished reading message #" + std::to_string(fin.seq) +
                           ", which this rank is not waiting for",
                       from.rank(), true);
        return;
    }
    auto w = *it;
    fins_.erase(it);
    wake(w);
}

void mailbox::link_lost(peer_link& from, const std::string& why) {
    int src = from.rank();
    gone_[static_cast<std::size_t>(src)] = why.empty() ? "its connection closed" : why;
    if (failed_)
        return;
    bool needed = std::any_of(fins_.begin(), fins_.end(), [src](const auto& w) { return w->dest == src; }) ||
                  std::any_of(posted_.begin(), posted_.end(), [src](const auto& w) { return w->source == src; });
    auto core = core_.lock();
    if (!needed && core && std::any_of(posted_.begin(), posted_.end(), [](const auto& w) { return w->source < 0; })) {
        bool anyone = false;
        for (int r = 0; r < static_cast<int>(gone_.size()); ++r)
            anyone = anyone || (r != core->rank() && gone_[static_cast<std::size_t>(r)].empty());
        needed = !anyone;
    }
    if (!needed)
        return;
    try {
        source_gone(src);
    } catch (const std::exception&) {
        // The group failed (fail_all woke every wait with it).
    }
}

void mailbox::source_gone(int source) {
    auto core = core_.lock();
    if (!core)
        throw std::system_error(std::make_error_code(std::errc::connection_aborted), "cordma::group: gone");
    if (!core->failed()) {
        if (source >= 0)
            core->fail(std::errc::connection_aborted,
                       core->rank_name(source) + " went away: " + gone_[static_cast<std::size_t>(source)], source,
                       true);
        else
            core->fail(std::errc::connection_aborted, "every other rank went away, and a recv_any waits", -1, true);
    }
    core->throw_failure();
}

void mailbox::fail_all() {
    if (failed_)
        return;
    failed_ = true;
    kept_.clear();
    auto posted = std::exchange(posted_, {});
    auto fins = std::exchange(fins_, {});
    for (auto& w : posted) {
        w->failed = true;
        wake(w);
    }
    for (auto& w : fins) {
        w->failed = true;
        wake(w);
    }
}

}  // namespace cordma::detail
