// cordma::rpc::blocking_client: an rpc::client behind blocking calls
// (client::call_sync), connected with sync_wait, its text overloads copying
// nothing on the way out (a string_view's bytes are the request).
#include <cordma/rpc_blocking.hpp>

#include <stdexcept>
#include <utility>

#include <cordma/sync_wait.hpp>

namespace cordma::rpc {

namespace {

void check_positive(std::chrono::milliseconds value, const char* what) {
    if (value.count() <= 0)
        throw std::invalid_argument(std::string("cordma::rpc::blocking_client: ") + what + " = " +
                                    std::to_string(value.count()) + " ms; it must be positive");
}

std::span<const std::byte> bytes_view(std::string_view text) noexcept {
    return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

}  // namespace

blocking_client::blocking_client() : blocking_client(builder{}, blocking_client_options{}) {}

blocking_client::blocking_client(blocking_client_options options) : blocking_client(builder{}, std::move(options)) {}

blocking_client::blocking_client(builder b, blocking_client_options options)
    : builder_(std::move(b)), options_(std::move(options)) {
    check_positive(options_.timeout, "blocking_client_options::timeout");
    check_positive(options_.connect_timeout, "blocking_client_options::connect_timeout");
    builder_.connect_timeout(options_.connect_timeout);
}

blocking_client::blocking_client(blocking_client&& other) noexcept
    : builder_(std::move(other.builder_)),
      options_(std::move(other.options_)),
      client_(std::move(other.client_)),
      peer_(std::move(other.peer_)),
      connected_(std::exchange(other.connected_, false)) {}

blocking_client& blocking_client::operator=(blocking_client&& other) noexcept {
    if (this != &other) {
        close();
        builder_ = std::move(other.builder_);
        options_ = std::move(other.options_);
        client_ = std::move(other.client_);
        peer_ = std::move(other.peer_);
        connected_ = std::exchange(other.connected_, false);
    }
    return *this;
}

// rpc::client's destructor shuts the connection down without waiting for
// the peer (close() would wait: not on the event listener thread, and not
// from a destructor that may run while unwinding).
blocking_client::~blocking_client() = default;

void blocking_client::connect(std::string_view address) {
    if (connected_)
        throw std::logic_error("cordma::rpc::blocking_client::connect(" + std::string(address) +
                               "): connected already, to " + peer_ + " (close() first)");
    client_options o = options_.rpc;
    o.deadline = options_.timeout;
    client_ = sync_wait(rpc::client::connect(builder_, std::string(address), o));
    peer_ = client_.peer();
    connected_ = true;
}

void blocking_client::connect(std::string_view host, std::uint16_t port) {
    std::string address = host.find(':') != std::string_view::npos && !host.starts_with('[')
                              ? "[" + std::string(host) + "]"  // an IPv6 address
                              : std::string(host);
    connect(address + ":" + std::to_string(port));
}

bool blocking_client::connected() const noexcept { return connected_; }

std::vector<std::byte> blocking_client::call(std::uint32_t method, std::span<const std::byte> request) {
    return call(method, request, options_.timeout);
}

std::vector<std::byte> blocking_client::call(std::uint32_t method, std::span<const std::byte> request,
                                             std::chrono::milliseconds timeout) {
    if (!connected_)
        throw std::logic_error("cordma::rpc::blocking_client::call(" + std::to_string(method) +
                               "): not connected (connect() first)");
    check_positive(timeout, "the call's timeout");
    return client_.call_sync(method, request, {.deadline = timeout});
}

std::vector<std::byte> blocking_client::call(std::uint32_t method, std::span<const std::byte> request,
                                             const call_options& options) {
    if (!connected_)
        throw std::logic_error("cordma::rpc::blocking_client::call(" + std::to_string(method) +
                               "): not connected (connect() first)");
    call_options o = options;
    if (o.deadline.count() < 0)
        throw std::invalid_argument("cordma::rpc::blocking_client::call(" + std::to_string(method) +
                                    "): call_options::deadline is negative (" + std::to_string(o.deadline.count()) +
                                    " ms); 0 takes blocking_client_options::timeout");
    if (o.deadline.count() == 0)
        o.deadline = options_.timeout;
    return client_.call_sync(method, request, o);
}

std::string blocking_client::call(std::uint32_t method, std::string_view request) {
    return text_of(call(method, bytes_view(request), options_.timeout));
}

std::string blocking_client::call(std::uint32_t method, std::string_view request, std::chrono::milliseconds timeout) {
    return text_of(call(method, bytes_view(request), timeout));
}

void blocking_client::close() {
    if (!connected_)
        return;
    connected_ = false;
    peer_.clear();
    rpc::client closing = std::move(client_);
    try {
        if (!builder_.event_listener()->running_in_this_thread())
            sync_wait(closing.close());
    } catch (...) {
        // A connection that broke is closed already: nothing to wait for.
    }
}

const std::string& blocking_client::peer() const noexcept { return peer_; }

rpc::client& blocking_client::client() {
    if (!connected_)
        throw std::logic_error("cordma::rpc::blocking_client::client: not connected (connect() first)");
    return client_;
}

}  // namespace cordma::rpc
