// builder::connect over rdma_cm: the data QP's handshake (retried while the
// peer refuses, until the connect deadline), then the agent's control QP,
// paired with it by a token; with builder::agent(false), the data QP alone,
// carrying the user's private data.
#include <system_error>

#include "connect/assemble.hpp"
#include "connect/connect.hpp"
#include "connect/connect_backoff.hpp"
#include "connect/rdma_cm/cm_handshake.hpp"
#include "engine/delay.hpp"
#include "verbs/check.hpp"

namespace cordma::detail {

task<connection> connect_rdma_cm(std::shared_ptr<runtime> rt, connection_settings settings, socket_address where,
                                 ready_hook hook) {
    co_await rt->event_listener->schedule();
    auto deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
    std::optional<cm_hello> hello;
    if (settings.with_agent) {
        hello.emplace();
        hello->token = random_token();
    }
    std::optional<cm_link> data;
    std::exception_ptr refused;  // the last definite answer, if any
    for (connect_backoff backoff;;) {
        try {
            data = co_await cm_connect_qp(rt, settings, where, qp_role::data, hello, deadline, !hook);
            break;
        } catch (const std::system_error& e) {
            // The deadline ran out during a retry after the peer refused:
            // what the caller needs to hear is the refusal.
            if (e.code() == std::errc::timed_out && refused)
                std::rethrow_exception(refused);
            // Nothing listening yet, or the host not answering yet: a server
            // started at the same time as its client (or booting) is not up
            // yet. Try again until the deadline.
            bool not_yet = e.code() == std::errc::connection_refused || e.code() == std::errc::host_unreachable;
            if (!not_yet || std::chrono::steady_clock::now() + backoff.step() >= deadline)
                throw;
            refused = std::current_exception();
        }
        co_await after(*rt->event_listener, backoff.next());
    }
    std::string peer = data->cm->peer();
    rdma_cm_id* id = data->cm->id();  // lives on in the connection's transport
    connection conn = assemble([&] {
        auto parts = parts_for(*rt, settings, std::move(data->qp), std::move(peer), std::move(data->cm), hello.has_value());
        parts.peer_private_data = std::move(data->peer_private_data);
        parts.reopen = [rt, settings, where] { return connect_rdma_cm(rt, settings, where); };
        return parts;
    }());
    if (hook) {
        // The listener sees ESTABLISHED, and may send, only after the RTU
        // rdma_establish sends: the hook's receives are posted by then.
        std::exception_ptr failure;
        try {
            hook(conn);
            check_minus_one(rdma_establish(id), [&] { return "rdma_establish(" + conn.peer() + ")"; });
        } catch (...) {
            failure = std::current_exception();
        }
        if (failure) {
            rdma_reject(id, nullptr, 0);
            conn.shut_down();
            std::rethrow_exception(failure);
        }
    }
    if (!hello)
        co_return conn;  // a plain connection: no control QP
    hello->kind = cm_hello::control;
    std::exception_ptr failure;
    try {
        auto control_deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
        cm_link control = co_await cm_connect_qp(rt, settings, where, qp_role::control, hello, control_deadline);
        attach_control(conn, std::move(control.qp), std::move(control.cm));
    } catch (...) {
        failure = std::current_exception();
    }
    if (failure) {
        conn.shut_down();
        std::rethrow_exception(failure);
    }
    co_return conn;
}

}  // namespace cordma::detail
