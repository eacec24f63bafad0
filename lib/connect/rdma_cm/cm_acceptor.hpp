#pragma once
/// A listening rdma_cm id: connect requests wait in a waiter_queue until an
/// accept() takes them and starts their handshakes, each on its own (a
/// client that stalls mid-handshake holds up nobody else), whose
/// connections then wait in the same queue for the next accept(); the
/// agents' control QPs that follow accepted
/// connections are paired with them by token. A listener with the agent
/// takes only clients that send cordma's hello; one with
/// builder::agent(false) only clients that do not (plain ones); each
/// refuses the others at once, with a cm_refusal saying why, and logs it.
/// Event listener thread only; destroyed there.

#include <cstddef>
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
    /// Instead of all the above: a client whose handshake has completed,
    /// for the next accept().
    connection accepted;
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
    /// The server's half of a client's handshake, bounded by
    /// connect_timeout; its connection then queues for accept().
    task<void> handshake(std::shared_ptr<cm_acceptor> self, connect_request request);
    void refuse_client(rdma_cm_id* id, cm_refusal::reason_type reason, const char* why) noexcept;
    void shut() noexcept;

    std::shared_ptr<runtime> rt_;
    connection_settings settings_;
    rdma_cm_id* id_ = nullptr;
    std::string address_;
    std::shared_ptr<waiter_queue<connect_request>> requests_;
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
