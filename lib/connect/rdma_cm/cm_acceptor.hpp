#pragma once
/// A listening rdma_cm id. Every client is answered as it arrives, with no
/// accept() needed: its handshake runs in the background (at most
/// max_handshakes at once, the others waiting their turn), and its
/// connection then waits for the next accept(). Clients held (handshaking,
/// waiting to, or connected and not yet accepted) never exceed
/// builder::backlog: past it a client is refused with a cm_refusal saying
/// so, which it retries until its connect_timeout. The agents' control QPs
/// that follow are paired with their connections by token. A listener
/// with the agent takes only clients that send cordma's hello; one with
/// builder::agent(false) only clients that do not (plain ones); each
/// refuses the others at once, with a cm_refusal saying why, and logs it.
/// Event listener thread only; destroyed there.

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rdma/rdma_cma.h>

#include <cordma/address.hpp>
#include <cordma/builder.hpp>

#include "connect/acceptor.hpp"
#include "connect/rdma_cm/cm_hello.hpp"
#include "connect/runtime.hpp"
#include "engine/cm_target.hpp"
#include "engine/waiter_queue.hpp"

namespace cordma::detail {

class connection_state;

struct connect_request {
    rdma_cm_id* id = nullptr;
    std::optional<cm_hello> hello;
    /// What a plain client sent (builder::agent(false) listeners).
    std::vector<std::byte> private_data;
};

class cm_acceptor : public cm_target, public acceptor {
public:
    /// Binds and listens at once (a bad or busy address throws here), and
    /// checks the settings against the device the address is on.
    static std::shared_ptr<cm_acceptor> make(std::shared_ptr<runtime> rt, connection_settings settings,
                                             const socket_address& where);
    ~cm_acceptor() override;

    const std::string& address() const noexcept override { return address_; }
    const connection_settings& settings() const noexcept override { return settings_; }
    task<connection> accept(std::stop_token token) override;
    void close() override;

private:
    cm_acceptor(std::shared_ptr<runtime> rt, connection_settings settings, const socket_address& where);
    static void dispatch(cm_target* self, const cm_event_copy& event) noexcept;
    void on_cm_event(const cm_event_copy& event) noexcept;
    void accept_control(rdma_cm_id* id, const cm_hello& hello) noexcept;
    /// A control request that came before its connection's handshake had
    /// ended here: refused once connect_timeout has passed without it.
    void expire_early_control(std::uint64_t token) noexcept;
    /// Queues the client's handshake; start_waiting() starts it.
    void admit(connect_request request) noexcept;
    /// Asks for a start_waiting() pass on the next turn of the event
    /// listener, if one could start a handshake and none is asked for.
    void schedule_starts() noexcept;
    /// Starts waiting handshakes, oldest first, while fewer than
    /// max_handshakes are under way: at most handshakes_per_turn of them.
    void start_waiting() noexcept;
    /// The server's half of a client's handshake, bounded by
    /// connect_timeout; its connection then queues for accept(), and the
    /// next waiting client's handshake starts.
    task<void> handshake(std::shared_ptr<cm_acceptor> self, connect_request request);
    void handshake_ended() noexcept;
    /// Clients held now: handshaking, waiting to, or waiting for accept().
    std::size_t held() const noexcept { return handshakes_ + waiting_.size() + ready_->ready(); }
    void refuse_client(rdma_cm_id* id, cm_refusal::reason_type reason, const char* why) noexcept;
    void refuse_full(rdma_cm_id* id) noexcept;
    void shut() noexcept;

    /// Handshakes under way at once, at most (each holds a QP and a
    /// coroutine frame until its client answers or connect_timeout ends it).
    static constexpr std::size_t max_handshakes = 64;
    /// Handshakes started per turn of the event listener, at most. Starting
    /// one creates a QP and answers the request (milliseconds in the
    /// kernel); the events that complete handshakes (cheap) are read first,
    /// all of them, so a storm of new requests neither delays a connected
    /// client's first call nor holds back everyone's completions.
    static constexpr std::size_t handshakes_per_turn = 4;

    std::shared_ptr<runtime> rt_;
    connection_settings settings_;
    rdma_cm_id* id_ = nullptr;
    std::string address_;
    // Connected clients, for accept().
    std::shared_ptr<waiter_queue<connection>> ready_;
    // Clients whose handshake has not started, oldest first.
    std::deque<connect_request> waiting_;
    std::size_t handshakes_ = 0;
    bool start_asked_ = false;  // a start_waiting() pass is posted
    // Clients refused since the backlog last had room (logged once per
    // stretch, not once per client of a storm).
    std::size_t refused_full_ = 0;
    // Accepted connections whose agent's control QP has yet to arrive.
    std::map<std::uint64_t, std::weak_ptr<connection_state>> awaiting_control_;
    // Control QP requests that arrived before their data QP's handshake had
    // ended on this side: the client sends one as soon as it sees its own
    // ESTABLISHED, and ours comes later when the RTU is late or lost (a
    // loaded or lossy link). Kept, by token, until that handshake ends.
    struct early_control {
        rdma_cm_id* id = nullptr;
        cm_hello hello;
        std::shared_ptr<cordma::event_listener::timer> expiry;
    };
    std::map<std::uint64_t, early_control> early_control_;
    std::weak_ptr<cm_acceptor> self_;
};

}  // namespace cordma::detail
