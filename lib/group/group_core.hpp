#pragma once
/// What a cordma::group is: its rank, the links to every other rank, the
/// collective in progress, and whether the group has failed (and why).
/// Event listener thread only, except where noted.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/group.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/task.hpp>

#include "core/coarse_clock.hpp"
#include "core/trace_span.hpp"
#include "group/collective.hpp"
#include "group/fan_out.hpp"
#include "engine/pending_source.hpp"
#include "group/group_tally.hpp"
#include "group/mailbox.hpp"
#include "link/link_wire.hpp"
#include "link/peer_link.hpp"

namespace cordma::detail {

class group_core : public link_owner, public std::enable_shared_from_this<group_core> {
public:
    group_core(cordma::builder b, group_options options, int rank, std::vector<std::string> endpoints);
    /// The last group handle is gone: closes every connection (the links'
    /// dispatchers end as their receives flush), unless close() did.
    ~group_core();
    group_core(const group_core&) = delete;
    group_core& operator=(const group_core&) = delete;

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return static_cast<int>(endpoints_.size()); }
    const std::string& endpoint(int r) const { return endpoints_.at(static_cast<std::size_t>(r)); }
    const group_options& options() const noexcept { return options_; }
    cordma::builder& builder() noexcept { return builder_; }
    const std::shared_ptr<cordma::event_listener>& event_listener() const noexcept { return event_listener_; }
    /// "rank 2 (10.78.0.3:7600)".
    std::string rank_name(int r) const;
    /// Its collectives' counts (group::metrics). Any thread.
    const group_tally& tally() const noexcept { return tally_; }
    peer_link& link(int r) const { return *links_.at(static_cast<std::size_t>(r)); }
    /// Takes the link to rank r and starts draining it at once: a rank
    /// still forming (waiting for others) must already answer the pings of
    /// ranks that have formed and wait in their first collective.
    void set_link(int r, std::shared_ptr<peer_link> l) {
        mail();
        l->set_message_sink(mailbox_);
        // Held first: a frame already waiting may fail the group at once,
        // and fail() must find this link to tell and close it.
        auto& held = links_.at(static_cast<std::size_t>(r));
        held = std::move(l);
        held->start();
    }
    bool has_link(int r) const { return links_.at(static_cast<std::size_t>(r)) != nullptr; }

    /// The group failed: remembers the first reason, wakes every waiting
    /// step, and (tell_peers) sends an abort to every other rank naming
    /// `rank_at_fault` (-1: none in particular).
    void fail(std::errc code, const std::string& why, int rank_at_fault, bool tell_peers) override;
    bool failed() const noexcept override { return failure_.has_value(); }
    [[noreturn]] void throw_failure() const override;
    const char* module_name() const noexcept override { return "group"; }
    /// A collective's name (collective.hpp), or the link's for its ops.
    std::string op_name(link_wire::op o) const override { return group_op_name(o); }
    /// A reduction's element type and operation.
    std::string describe_extra(const link_wire::header& h) const override;
    /// "mismatched collectives: rank 2 (...) sent ..., but this rank called ...".
    std::string mismatch(const std::string& peer, const std::string& sent, const std::string& expected) const override;
    /// "cordma::group, rank 1 of 3: ", how this rank's errors begin.
    std::string prefix() const;

    /// The collective in progress: its number and the token that stops
    /// when its deadline passes or its caller's stop token is stopped.
    struct current_call {
        link_wire::op op = link_wire::op::none;  // op_of(the collective)
        std::uint32_t seq = 0;
        std::stop_token token;
        trace_id trace;  // its group_call's: the frames this rank sends carry it
    };
    const current_call& current() const noexcept { return current_; }

    /// Runs `body` (which reads current()) as collective `op`: one at a time,
    /// under its deadline; any failure breaks the group (see group.hpp).
    task<void> run(collective c, group_call call, task<void> body);

    /// Point-to-point messages (group.hpp; lib/group/messages.cpp): `dest`
    /// and `source` checked by the caller.
    task<void> send_message(int dest, local_slice payload, std::uint32_t tag, group_call call);
    task<message_info> recv_message(int source, local_slice into, std::uint32_t tag, group_call call);
    /// The group's mailbox, made on first use (it needs weak_from_this()).
    mailbox& mail();

    /// Registered memory of the group's own, at least `size` bytes, for
    /// partial results (reductions). Valid until the next call.
    local_slice scratch(std::size_t size);
    /// The list a collective's fan_out keeps its steps in (fan_out.hpp).
    fan_list& fan() noexcept { return fan_; }

    task<void> close();

    /// How often a waiting collective checks its deadline and probes its
    /// peers (a keepalive to a host that is gone fails within the QP's
    /// retry time, which breaks the link and names the rank).
    static constexpr std::chrono::milliseconds tick_interval{500};

private:
    /// A point-to-point call's deadline and stop, checked by the ticks
    /// (no timer per call) while the call lives in its coroutine frame.
    class p2p_scope;
    friend class p2p_scope;
    /// Throws group_error (timed_out or operation_canceled) for a call
    /// that stopped before it did anything: the group goes on.
    [[noreturn]] void throw_stopped(const p2p_scope& scope, const std::string& what) const;
    /// Stops the point-to-point calls whose deadline has passed; returns
    /// the earliest deadline of the others (time_point::max() for none).
    coarse_clock::time_point expire_p2p_calls(coarse_clock::time_point now);

    /// Arms a tick for `at` unless one is due by then.
    void tick_at(coarse_clock::time_point at);
    void tick();

    cordma::builder builder_;
    group_options options_;
    int rank_;
    std::vector<std::string> endpoints_;
    std::shared_ptr<cordma::event_listener> event_listener_;
    // Its loop's turn ticks (event_listener_access::turn_tick): where a
    // collective's latency starts and ends.
    const std::uint64_t* turn_tick_ = nullptr;
    group_tally tally_;  // group::metrics, and the process's cordma_group_* sums
    const std::uint64_t* turn_ms_ = nullptr;  // its loop's turn time, coarse ms
    std::uint64_t began_ms_ = 0;              // the collective in progress began
    /// The collective in progress, for a stuck report (pending_source.hpp).
    static void collect_pending(const void* self, std::uint64_t now_ms, std::vector<pending_operation>& out);
    std::vector<std::shared_ptr<peer_link>> links_;
    std::optional<group_error> failure_;
    current_call current_;
    std::uint32_t next_seq_ = 0;
    bool busy_ = false;
    // The collective in progress: when it must end, and what stops it.
    coarse_clock::time_point deadline_{};
    std::stop_source stop_;
    // One timer at a time checks the deadline and sends keepalives while a
    // collective runs (no timer per collective).
    coarse_clock::time_point next_tick_{};
    bool ticking_ = false;
    bool closed_ = false;
    local_mr scratch_;
    fan_list fan_;
    std::shared_ptr<mailbox> mailbox_;
    std::vector<p2p_scope*> p2p_calls_;
    // Last: leaves the stuck reports before anything it reads goes.
    std::optional<pending_source_registration> pending_source_;
};

/// The group's error types and messages, shared by the collectives.
const char* element_name(element_type type) noexcept;
std::size_t element_size(element_type type) noexcept;
const char* reduce_name(reduce_op op) noexcept;

}  // namespace cordma::detail
