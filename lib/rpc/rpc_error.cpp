// rpc_error's category: what each rpc_errc means, and the generic
// std::errc it compares equal to where there is one.
#include <cordma/rpc.hpp>

namespace cordma::rpc {

namespace {

class category final : public std::error_category {
public:
    const char* name() const noexcept override { return "cordma.rpc"; }
    std::string message(int value) const override {
        switch (static_cast<rpc_errc>(value)) {
        case rpc_errc::unknown_method: return "unknown method";
        case rpc_errc::handler_failed: return "the handler failed";
        case rpc_errc::too_large: return "too large";
        case rpc_errc::protocol: return "protocol violation";
        case rpc_errc::timed_out: return "timed out";
        case rpc_errc::cancelled: return "cancelled";
        case rpc_errc::server_gone: return "the server is gone";
        }
        return "unknown rpc error " + std::to_string(value);
    }
    std::error_condition default_error_condition(int value) const noexcept override {
        switch (static_cast<rpc_errc>(value)) {
        case rpc_errc::unknown_method: return std::errc::function_not_supported;
        case rpc_errc::too_large: return std::errc::message_size;
        case rpc_errc::protocol: return std::errc::protocol_error;
        case rpc_errc::timed_out: return std::errc::timed_out;
        case rpc_errc::cancelled: return std::errc::operation_canceled;
        case rpc_errc::server_gone: return std::errc::not_connected;
        default: return {value, *this};
        }
    }
};

}  // namespace

const std::error_category& rpc_category() noexcept {
    // Never destroyed (like the standard library's own categories): an
    // error made on an event listener thread still running while the
    // program exits must find it alive.
    static const category* instance = new category;
    return *instance;
}

}  // namespace cordma::rpc
