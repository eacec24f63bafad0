#include "connect/tcp/tcp_io.hpp"

#include <cstdio>
#include <cstring>
#include <exception>

namespace cordma::detail {

using asio::ip::tcp;

void tcp_io::close() noexcept {
    asio::error_code ignored;
    try {
        timer.cancel();
    } catch (const std::exception&) {
    }
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
}

socket_address address_of(const tcp::endpoint& endpoint) {
    socket_address address;
    std::memcpy(&address.storage, endpoint.data(), endpoint.size());
    address.length = static_cast<socklen_t>(endpoint.size());
    return address;
}

tcp::endpoint to_endpoint(const socket_address& address) {
    tcp::endpoint endpoint;
    std::memcpy(endpoint.data(), address.get(), address.length);
    endpoint.resize(address.length);
    return endpoint;
}

std::string endpoint_string(const tcp::endpoint& endpoint) {
    socket_address address;
    std::memcpy(&address.storage, endpoint.data(), endpoint.size());
    address.length = static_cast<socklen_t>(endpoint.size());
    return address.to_string();
}

std::string seconds(std::chrono::milliseconds limit) {
    std::string text = std::to_string(limit.count() / 1000);
    if (auto ms = limit.count() % 1000; ms != 0) {
        char frac[8];
        std::snprintf(frac, sizeof frac, ".%03d", static_cast<int>(ms));
        std::string f = frac;
        while (f.back() == '0')
            f.pop_back();
        text += f;
    }
    return text;
}

void start_deadline(tcp_service& service, std::shared_ptr<tcp_io> io, std::chrono::milliseconds limit) {
    asio::post(service.context(), [io = std::move(io), limit] {
        io->timer.expires_after(limit);
        io->timer.async_wait([io](const asio::error_code& ec) {
            if (ec || io->settled)
                return;
            io->timed_out = true;
            io->close();
        });
    });
}

void io_done::operator()(const asio::error_code& ec, std::size_t bytes) const {
    wait->result = {ec, bytes, io->timed_out};
    el->post([wait = wait] {
        if (!wait->abandoned.load(std::memory_order_acquire))
            wait->handle.resume();
    });
}

namespace {

// Asio reports socket errors in its own "asio.system" category, whose
// values are errno values but which does not compare equal to std::errc;
// cordma's errors are in the generic category, so that
// `e.code() == std::errc::host_unreachable` holds whatever the transport.
// (Asio's other categories, such as misc for EOF, are handled before this.)
std::error_code generic(const asio::error_code& ec) {
    if (ec.category() == asio::error::get_system_category() || ec.category() == std::system_category())
        return {ec.value(), std::generic_category()};
    return ec;
}

}  // namespace

void check(const io_result& result, const std::string& who, std::chrono::milliseconds limit, const char* step) {
    if (result.timed_out)
        throw handshake_error(std::make_error_code(std::errc::timed_out),
                              who + ": timed out after " + seconds(limit) + " s while " + step +
                                  " (builder::connect_timeout)");
    if (result.ec == asio::error::eof)
        throw handshake_error(std::make_error_code(std::errc::connection_aborted),
                              who + ": the peer closed the TCP connection while " + step +
                                  " (is it a cordma peer using endpoint_exchange::tcp?)");
    if (result.ec)
        throw handshake_error(generic(result.ec), who + ": " + step + ": " + result.ec.message());
}

}  // namespace cordma::detail
