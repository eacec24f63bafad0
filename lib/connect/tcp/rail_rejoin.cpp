// A failed rail admitted again over the TCP exchange socket
// (rail_rejoin.hpp: the conversation; docs/rails.md: what users see).
#include "connect/tcp/rail_rejoin.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>

#include <infiniband/verbs.h>

#include "connect/qp_settings.hpp"
#include "engine/connection_state.hpp"
#include "engine/rail_stripes.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace {

std::string seconds_text(std::chrono::milliseconds t) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(t.count()) / 1000.0);
    return text;
}

}  // namespace

rail_qp make_rail_qp(runtime& rt, const connection_settings& settings, std::size_t rail) {
    const auto& device = rt.rail_device(rail);
    connection_settings rail_settings = settings;
    rail_settings.port = 0;
    rail_settings.gid_index = -1;
    rail_qp out;
    out.options = qp_options(rail_settings, *device, nullptr, 0, qp_role::data);
    out.qp = rt.create_rail_qp(rail, settings.capacity);
    ibv_mtu mtu = std::min(out.options.mtu, device->query_port(out.options.port).active_mtu);
    out.ours = endpoint_message{out.qp->local_endpoint(out.options.port, out.options.gid_index), mtu,
                                settings.with_agent};
    out.ours.rails = static_cast<std::uint8_t>(rt.rail_count());
    return out;
}

rail_rejoin::rail_rejoin(std::shared_ptr<runtime> rt, connection_settings settings, bool drives, sender send)
    : rt_(std::move(rt)), settings_(std::move(settings)), drives_(drives), send_(std::move(send)) {}

rail_rejoin::~rail_rejoin() {
    // A probe still posted must not call back into us; the attempt's QP
    // goes to ERROR so its state lets go at once.
    for (attempt& a : rails_) {
        if (!a.state)
            continue;
        if (a.probing)
            a.state->abandon(&a.probe);
        a.state->shut_down("the connection closed while its rail was being admitted again");
    }
}

void rail_rejoin::attach(std::weak_ptr<connection_state> state) noexcept {
    state_ = std::move(state);
    if (auto s = live_state())
        for (std::uint8_t rail = 1; rail < rt_->rail_count(); ++rail)
            if (!s->stripes()->up(rail))
                rail_down(rail, s->stripes()->generation(rail));
}

std::shared_ptr<connection_state> rail_rejoin::live_state() const noexcept {
    auto state = state_.lock();
    if (!state || state->broken() || state->stripes() == nullptr)
        return nullptr;
    return state;
}

void rail_rejoin::send(rail_kind what, std::uint8_t rail, std::uint32_t generation, std::uint16_t attempt,
                       const endpoint_message* endpoint, std::uint64_t probe_address,
                       std::uint32_t probe_rkey) noexcept {
    rail_message m;
    m.what = what;
    m.rail = rail;
    m.attempt = attempt;
    m.generation = generation;
    if (endpoint != nullptr)
        m.endpoint = *endpoint;
    m.probe_address = probe_address;
    m.probe_rkey = probe_rkey;
    try {
        send_(encode_rail_message(m));
    } catch (const std::exception& e) {
        logf(log_level::warning, "cordma: rail %u: could not send '%s' to the peer: %s", static_cast<unsigned>(rail),
             to_string(what), e.what());
    }
}

void rail_rejoin::rail_down(std::uint8_t rail, std::uint32_t generation) noexcept {
    if (stopped_)
        return;
    if (quiet_rail_ != rail)
        send(rail_kind::down, rail, generation);
    if (!drives_)
        return;
    attempt& a = rails_[rail];
    if (a.admitted_at != std::chrono::steady_clock::time_point{}) {
        bool stable = std::chrono::steady_clock::now() - a.admitted_at >= stable_after;
        a.hold_down = stable ? first_hold_down : std::min(a.hold_down * 2, longest_hold_down);
    }
    schedule(rail, a.hold_down);
}

void rail_rejoin::stop() noexcept {
    stopped_ = true;
    for (attempt& a : rails_)
        drop(a);
}

void rail_rejoin::cancel_timer(attempt& a) noexcept {
    if (a.timer_set) {
        a.timer->cancel();
        a.timer_set = false;
    }
}

void rail_rejoin::drop(attempt& a) noexcept {
    cancel_timer(a);
    a.timer.reset();
    a.mine = {};
    if (a.state) {
        if (a.probing) {
            a.state->abandon(&a.probe);
            a.probing = false;
        }
        a.state->shut_down("the attempt to admit the rail again was dropped");
        a.state.reset();
    }
}

void rail_rejoin::on_bytes(const std::array<std::uint8_t, rail_message_size>& bytes) noexcept {
    rail_message m;
    try {
        m = decode_rail_message(bytes, rt_->rail_count());
    } catch (const std::exception& e) {
        // A peer that says something else on this socket is not one we can
        // keep rails with: only this connection ends.
        if (auto state = state_.lock())
            state->shut_down(std::string("the peer sent a malformed message on the TCP exchange socket: ") + e.what(),
                             disconnect_cause::other);
        return;
    }
    if (stopped_)
        return;
    try {
        handle(m);
    } catch (const std::exception& e) {
        logf(log_level::warning, "cordma: rail %u: '%s' from the peer: %s", static_cast<unsigned>(m.rail),
             to_string(m.what), e.what());
        if (drives_ && m.what == rail_kind::answer)
            give_up(m.rail, e.what());
    }
}

void rail_rejoin::handle(const rail_message& m) {
    switch (m.what) {
    case rail_kind::down:
        if (auto state = live_state()) {
            std::string why = "the peer found rail " + std::to_string(m.rail) + " failed";
            quiet_rail_ = m.rail;  // not told back; shut_down_rail is noexcept
            state->stripes()->shut_down_rail(m.rail, m.generation, why);
            quiet_rail_ = 0;
        }
        return;
    case rail_kind::join:
        if (!drives_)
            joined(m);
        return;
    case rail_kind::answer:
        if (drives_)
            answered(m);
        return;
    case rail_kind::up:
        if (!drives_) {
            attempt& a = rails_[m.rail];
            if (!a.state || a.generation != m.generation || a.number != m.attempt)
                return;
            auto state = live_state();
            if (!state || a.state->broken()) {
                drop(a);
                return;
            }
            state->stripes()->admit(m.rail, std::move(a.state), m.generation);
            a.state.reset();
        }
        return;
    }
}

void rail_rejoin::schedule(std::uint8_t rail, std::chrono::milliseconds delay) noexcept {
    attempt& a = rails_[rail];
    if (stopped_ || a.timer_set || a.mine.qp || a.state)
        return;
    try {
        a.timer = rt_->event_listener->call_after(delay, [self = weak_from_this(), rail] {
            if (auto s = self.lock()) {
                s->rails_[rail].timer_set = false;
                s->try_join(rail);
            }
        });
        a.timer_set = true;
    } catch (const std::exception& e) {
        logf(log_level::warning, "cordma: rail %u: cannot schedule its return: %s", static_cast<unsigned>(rail),
             e.what());
    }
}

std::shared_ptr<connection_state> rail_rejoin::new_state(std::uint8_t rail, std::shared_ptr<queue_pair> qp) const {
    auto primary = state_.lock();
    if (!primary)
        throw std::runtime_error("the connection is gone");
    auto state = std::make_shared<connection_state>(primary->event_listener(), std::move(qp),
                                                    primary->peer() + " (rail " + std::to_string(rail) + ")",
                                                    primary->results_pool(), "rail");
    state->set_rail(rail);
    return state;
}

void rail_rejoin::try_join(std::uint8_t rail) noexcept {
    auto state = live_state();
    attempt& a = rails_[rail];
    if (stopped_ || !state || state->stripes()->up(rail) || a.mine.qp || a.state)
        return;
    try {
        a.mine = make_rail_qp(*rt_, settings_, rail);
    } catch (const std::invalid_argument& e) {
        // No ACTIVE port on the rail's device yet (its link is down): look
        // again a hold-down later.
        logf(log_level::debug, "cordma: rail %u of the connection to %s not back yet: %s",
             static_cast<unsigned>(rail), state->peer().c_str(), e.what());
        schedule(rail, first_hold_down);
        return;
    } catch (const std::exception& e) {
        give_up(rail, e.what());
        return;
    }
    a.generation = state->stripes()->generation(rail) + 1;
    ++a.number;
    send(rail_kind::join, rail, a.generation, a.number, &a.mine.ours);
    arm_deadline(rail, settings_.connect_timeout);
}

void rail_rejoin::arm_deadline(std::uint8_t rail, std::chrono::milliseconds limit) noexcept {
    attempt& a = rails_[rail];
    cancel_timer(a);
    try {
        a.timer = rt_->event_listener->call_after(limit, [self = weak_from_this(), rail, number = a.number] {
            auto s = self.lock();
            if (!s)
                return;
            attempt& b = s->rails_[rail];
            b.timer_set = false;
            if ((b.mine.qp || b.state) && b.number == number)
                s->give_up(rail, std::string(b.state ? "its probe read" : "the peer's answer") +
                                     " did not come within connect_timeout (" +
                                     seconds_text(s->settings_.connect_timeout) + ")");
        });
        a.timer_set = true;
    } catch (const std::exception& e) {
        logf(log_level::warning, "cordma: rail %u: cannot bound its attempt: %s", static_cast<unsigned>(rail),
             e.what());
    }
}

void rail_rejoin::answered(const rail_message& m) {
    attempt& a = rails_[m.rail];
    if (!a.mine.qp || a.generation != m.generation || a.number != m.attempt)
        return;  // an answer to an attempt given up
    if (!live_state()) {
        drop(a);
        return;
    }
    qp_connect_options options = a.mine.options;
    options.mtu = std::min(a.mine.ours.mtu, m.endpoint.mtu);
    a.mine.qp->connect(m.endpoint.endpoint, options);
    a.state = new_state(m.rail, std::move(a.mine.qp));
    a.mine = {};
    if (!probe_memory_)
        probe_memory_ = rt_->pool->allocate(64);
    a.probe = probe_op{};
    a.probe.owner = this;
    a.probe.rail = m.rail;
    a.probe.kind = op_kind::read;
    a.probe.sge_count = 1;
    a.probe.local[0] = probe_memory_.all().slice(0, 8);
    a.probe.remote.address = m.probe_address;
    a.probe.remote.length = 8;
    a.probe.remote.rkey = m.probe_rkey;
    a.probe.connection = a.state.get();
    a.probe.on_done = &rail_rejoin::probe_done;
    a.probing = true;
    if (!a.state->start(&a.probe)) {
        a.probing = false;
        probed(m.rail);
        return;
    }
    // The probe too is bounded (the deadline armed at the join runs on).
}

void rail_rejoin::probe_done(operation_base* op) noexcept {
    auto* probe = static_cast<probe_op*>(op);
    rail_rejoin* self = probe->owner;
    self->rails_[probe->rail].probing = false;
    // Out of the rail's completion handling before its state may go.
    try {
        self->rt_->event_listener->post([w = self->weak_from_this(), rail = probe->rail] {
            if (auto s = w.lock())
                s->probed(rail);
        });
    } catch (const std::exception&) {
        // Out of memory: the attempt stays where it is until the connection ends.
    }
}

void rail_rejoin::probed(std::uint8_t rail) noexcept {
    attempt& a = rails_[rail];
    if (stopped_ || !a.state)
        return;
    const probe_op& p = a.probe;
    if (p.error || p.status != IBV_WC_SUCCESS) {
        std::string why = "the probe read over the new queue pairs failed";
        if (p.error) {
            try {
                std::rethrow_exception(p.error);
            } catch (const std::exception& e) {
                why += std::string(": ") + e.what();
            }
        } else {
            why += std::string(": ") + ibv_wc_status_str(p.status);
        }
        give_up(rail, why);
        return;
    }
    auto state = live_state();
    if (!state) {
        drop(a);
        return;
    }
    if (a.state->broken()) {
        give_up(rail, "its new queue pair failed after the probe: " + a.state->broken_reason());
        return;
    }
    cancel_timer(a);
    state->stripes()->admit(rail, std::move(a.state), a.generation);
    a.state.reset();
    a.admitted_at = std::chrono::steady_clock::now();
    send(rail_kind::up, rail, a.generation, a.number);
}

void rail_rejoin::give_up(std::uint8_t rail, const std::string& why) noexcept {
    attempt& a = rails_[rail];
    drop(a);
    a.hold_down = std::min(a.hold_down * 2, longest_hold_down);
    if (auto state = live_state())
        logf(log_level::info, "cordma: rail %u of the connection to %s: admitting it again failed: %s; next try in %s",
             static_cast<unsigned>(rail), state->peer().c_str(), why.c_str(), seconds_text(a.hold_down).c_str());
    schedule(rail, a.hold_down);
}

void rail_rejoin::joined(const rail_message& m) {
    attempt& a = rails_[m.rail];
    drop(a);  // an earlier attempt the client gave up
    auto state = live_state();
    if (!state)
        return;
    if (m.generation != state->stripes()->generation(m.rail) + 1)
        throw std::invalid_argument("a join to make generation " + std::to_string(m.generation) + " where this side's is " +
                                    std::to_string(state->stripes()->generation(m.rail)));
    rail_qp mine = make_rail_qp(*rt_, settings_, m.rail);
    qp_connect_options options = mine.options;
    options.mtu = std::min(mine.ours.mtu, m.endpoint.mtu);
    mine.qp->connect(m.endpoint.endpoint, options);
    if (!probe_memory_)
        probe_memory_ = rt_->pool->allocate_zeroed(64);
    remote_slice word = probe_memory_.remote();
    if (word.rails <= m.rail)
        throw std::logic_error("the probe word is not registered on rail " + std::to_string(m.rail));
    a.state = new_state(m.rail, std::move(mine.qp));
    a.generation = m.generation;
    a.number = m.attempt;
    send(rail_kind::answer, m.rail, m.generation, m.attempt, &mine.ours, word.address, word.rail_rkeys[m.rail - 1]);
}

}  // namespace cordma::detail
