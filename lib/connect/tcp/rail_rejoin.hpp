#pragma once
/// A failed rail admitted again (builder::rails over the TCP endpoint
/// exchange): the conversation on the exchange socket after "ready"
/// (rail_message.hpp), one per connection, owned by its tcp_channel.
///
///  - Either side whose rail k fails (rail_stripes::rail_broken) tells the
///    peer ("down", with the rail's generation), which takes its own end of
///    the rail down at once instead of finding out by its own retries.
///  - The client (the side that connected) then waits a hold-down time
///    (1 s, doubled after each failed attempt and each failure within 10 s
///    of the rail coming back, up to 16 s), and once the
///    rail's device has an ACTIVE port, makes a new QP there and sends its
///    endpoint ("join"). The listener makes its own new QP, connects it and
///    answers with its endpoint and an 8-byte probe word ("answer"). The
///    client connects its QP and reads the probe word over the new rail:
///    only when that read succeeds is the rail admitted on the client, and
///    the client's "up" admits it on the listener. A failed probe or no
///    answer within the connection's connect_timeout is a failed attempt.
///  - The new QPs replace the old ones (rail_stripes::admit); the
///    generation, counted on both sides, keeps a late "down" about an old
///    QP from taking a new one down.
///
/// Event listener thread only.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <cordma/builder.hpp>
#include <cordma/event_listener.hpp>
#include <cordma/local_mr.hpp>
#include <cordma/queue_pair.hpp>
#include <cordma/rails.hpp>
#include <cordma/detail/operation.hpp>

#include "connect/runtime.hpp"
#include "connect/tcp/endpoint_message.hpp"
#include "connect/tcp/rail_message.hpp"

namespace cordma::detail {

class connection_state;

/// A QP made on rail `rail`'s device, with the options to connect it and
/// this side's endpoint message for it.
struct rail_qp {
    std::shared_ptr<queue_pair> qp;
    qp_connect_options options;
    endpoint_message ours;
};
/// Every QP setting applies to a rail as to rail 0 except builder::port
/// and gid_index, which are rail 0's: the rail's device's first ACTIVE
/// port and its first usable GID serve. Throws std::invalid_argument when
/// the device has no ACTIVE port (its link is down), verbs_error when the
/// QP cannot be made.
rail_qp make_rail_qp(runtime& rt, const connection_settings& settings, std::size_t rail);

class rail_rejoin : public std::enable_shared_from_this<rail_rejoin> {
public:
    using sender = std::function<void(const std::array<std::uint8_t, rail_message_size>&)>;

    /// `drives`: this side connected (it admits rails again; the listener
    /// answers). `send` writes one message on the socket, in order.
    rail_rejoin(std::shared_ptr<runtime> rt, connection_settings settings, bool drives, sender send);
    ~rail_rejoin();
    rail_rejoin(const rail_rejoin&) = delete;
    rail_rejoin& operator=(const rail_rejoin&) = delete;

    /// The connection; a rail already down (it failed before the transport
    /// was set) is reported now.
    void attach(std::weak_ptr<connection_state> state) noexcept;
    /// The connection's rail `rail` failed in `generation` (transport::rail_down).
    void rail_down(std::uint8_t rail, std::uint32_t generation) noexcept;
    /// A message the peer sent; a malformed one shuts the connection down.
    void on_bytes(const std::array<std::uint8_t, rail_message_size>& bytes) noexcept;
    /// The connection is closing: no more attempts.
    void stop() noexcept;

    /// The hold-down before the first attempt after a failure.
    static constexpr std::chrono::milliseconds first_hold_down{1000};
    static constexpr std::chrono::milliseconds longest_hold_down{16000};
    /// A rail up this long before it fails again starts from the first
    /// hold-down; one that fails sooner (a flapping link, a lossy one that
    /// fails every large piece) waits twice as long as last time.
    static constexpr std::chrono::milliseconds stable_after{10000};

private:
    struct probe_op : operation_base {
        rail_rejoin* owner = nullptr;
        std::uint8_t rail = 0;
    };
    /// One rail's attempt to come back.
    struct attempt {
        std::shared_ptr<event_listener::timer> timer;
        bool timer_set = false;
        std::chrono::milliseconds hold_down = first_hold_down;
        /// When it last came back (client); empty before.
        std::chrono::steady_clock::time_point admitted_at{};
        /// The generation the attempt in progress would make, and its
        /// number (the client's count; the listener's: the join's).
        std::uint32_t generation = 0;
        std::uint16_t number = 0;
        /// The client's new QP, until the answer comes.
        rail_qp mine;
        /// The new rail, probing (client) or waiting for "up" (listener).
        std::shared_ptr<connection_state> state;
        probe_op probe;
        bool probing = false;
    };

    void send(rail_kind what, std::uint8_t rail, std::uint32_t generation, std::uint16_t attempt = 0,
              const endpoint_message* endpoint = nullptr, std::uint64_t probe_address = 0,
              std::uint32_t probe_rkey = 0) noexcept;
    /// Client: gives the attempt in progress `limit` before it is given up
    /// (its answer, then its probe).
    void arm_deadline(std::uint8_t rail, std::chrono::milliseconds limit) noexcept;
    void handle(const rail_message& m);
    /// Client: after `delay`, try to bring `rail` back.
    void schedule(std::uint8_t rail, std::chrono::milliseconds delay) noexcept;
    void try_join(std::uint8_t rail) noexcept;
    void answered(const rail_message& m);
    static void probe_done(operation_base* op) noexcept;
    void probed(std::uint8_t rail) noexcept;
    /// Client: the attempt failed (`why`); the next after a longer hold-down.
    void give_up(std::uint8_t rail, const std::string& why) noexcept;
    /// Listener: a join; answers it with a new QP of its own.
    void joined(const rail_message& m);
    /// The rail's new state, on this connection's listener and peer.
    std::shared_ptr<connection_state> new_state(std::uint8_t rail, std::shared_ptr<queue_pair> qp) const;
    /// Stops the attempt's pending timer (hold-down or deadline), if any.
    static void cancel_timer(attempt& a) noexcept;
    void drop(attempt& a) noexcept;
    std::shared_ptr<connection_state> live_state() const noexcept;

    std::shared_ptr<runtime> rt_;
    connection_settings settings_;
    bool drives_;
    sender send_;
    std::weak_ptr<connection_state> state_;
    std::array<attempt, max_rails> rails_{};
    /// Client: the 8 bytes a probe reads into; listener: the probe word.
    local_mr probe_memory_;
    /// The rail a "down" from the peer is taking down (not told back); 0: none.
    std::uint8_t quiet_rail_ = 0;
    bool stopped_ = false;
};

}  // namespace cordma::detail
