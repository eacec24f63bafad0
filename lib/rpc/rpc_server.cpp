// cordma::rpc::server, the public handle: each call checks the handle and
// forwards to its server_state (server_state.cpp, server_calls.cpp).
#include <cordma/rpc.hpp>

#include "rpc/server_state.hpp"

namespace cordma::rpc {

server::server(builder& b, server_options options)
    : state_(std::make_shared<detail::server_state>(b, std::move(options))) {}

server& server::operator=(server&& other) noexcept {
    if (this != &other) {
        if (state_)
            state_->shut_down();
        state_ = std::move(other.state_);
    }
    return *this;
}

server::~server() {
    if (state_)
        state_->shut_down();
}

namespace {
detail::server_state& checked(const std::shared_ptr<detail::server_state>& s, const char* call) {
    if (!s)
        throw std::logic_error(std::string("cordma::rpc::server::") + call + " on an empty (moved-from) server");
    return *s;
}
}  // namespace

void server::handle(std::uint32_t method, std::string name, handler h) {
    checked(state_, "handle").handle(method, std::move(name), std::move(h));
}

void server::handle_into(std::uint32_t method, std::string name, reply_handler h) {
    checked(state_, "handle_into").handle_into(method, std::move(name), std::move(h));
}

void server::handle_any(std::string name, handler h) {
    checked(state_, "handle_any").handle_any(std::move(name), std::move(h));
}

task<void> server::serve(listener l, std::stop_token token) {
    auto state = state_;
    checked(state, "serve");
    co_await state->serve(std::move(l), std::move(token));
}

server_metrics server::metrics() const { return checked(state_, "metrics").metrics(); }
std::size_t server::clients() const { return checked(state_, "clients").clients(); }
std::vector<cordma::connection> server::connections() const { return checked(state_, "connections").connections(); }
ibv_srq* server::shared_receive_queue() const { return checked(state_, "shared_receive_queue").srq_handle(); }
const server_options& server::options() const { return checked(state_, "options").options(); }

}  // namespace cordma::rpc
