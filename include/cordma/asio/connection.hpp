#pragma once
/// \file
/// Part of <cordma/asio.hpp> (include that): connection's operations (send,
/// recv, write, read, atomics, close) as Asio asynchronous operations.

#include <cstdint>
#include <span>
#include <stop_token>
#include <vector>

#include <asio/cancellation_type.hpp>

#include <cordma/asio/async_cordma.hpp>
#include <cordma/connection.hpp>

namespace cordma {

// ---- Connection operations --------------------------------------------------
// Each is connection's operation of the same name (<cordma/connection.hpp>)
// as an Asio asynchronous operation, under the contract in
// <cordma/asio.hpp>. `conn` is a handle: copied, it need not outlive the call.

/// connection::send: SEND `local` to the peer's next posted receive.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send(connection conn, local_slice local, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, local](std::stop_token stop) mutable { return conn.send(local, std::move(stop)); });
}

/// connection::send_with_imm: SEND with a 32-bit immediate.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_with_imm(connection conn, local_slice local, std::uint32_t imm, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, local, imm](std::stop_token stop) mutable { return conn.send_with_imm(local, imm, std::move(stop)); });
}

/// connection::recv: posts a receive into `local` and waits for the peer's
/// SEND. Completion: void(std::error_code, recv_result). Cancelled after
/// posting, the message that lands in `local` goes to the next recv on
/// the connection (it is not lost).
template <class CompletionToken>
auto async_recv(connection conn, local_slice local, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, local](std::stop_token stop) mutable { return conn.recv(local, std::move(stop)); });
}

/// connection::recv with several buffers, filled in order. The slices are
/// copied in the call: the span need not outlive it.
/// Completion: void(std::error_code, recv_result).
template <class CompletionToken>
auto async_recv(connection conn, std::span<const local_slice> sg_list, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, sg = std::vector<local_slice>(sg_list.begin(), sg_list.end())](std::stop_token stop) mutable {
            return conn.recv(std::span<const local_slice>(sg), std::move(stop));
        });
}

/// connection::recv_imm: waits for the peer's write_with_imm (or a
/// zero-length send_with_imm). Completion: void(std::error_code, recv_result).
template <class CompletionToken>
auto async_recv_imm(connection conn, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn](std::stop_token stop) mutable { return conn.recv_imm(std::move(stop)); });
}

/// connection::write: RDMA WRITE `local` to `remote` (the sizes must match).
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_write(connection conn, local_slice local, remote_slice remote, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, local, remote](std::stop_token stop) mutable { return conn.write(local, remote, std::move(stop)); });
}

/// connection::write gathering several local slices (copied in the call)
/// into one remote range. Completion: void(std::error_code).
template <class CompletionToken>
auto async_write(connection conn, std::span<const local_slice> sg_list, remote_slice remote, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, sg = std::vector<local_slice>(sg_list.begin(), sg_list.end()), remote](std::stop_token stop) mutable {
            return conn.write(std::span<const local_slice>(sg), remote, std::move(stop));
        });
}

/// connection::write_with_imm: RDMA WRITE whose immediate the peer's
/// recv_imm yields. Completion: void(std::error_code).
template <class CompletionToken>
auto async_write_with_imm(connection conn, local_slice local, remote_slice remote, std::uint32_t imm,
                          CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [conn, local, remote, imm](std::stop_token stop) mutable {
            return conn.write_with_imm(local, remote, imm, std::move(stop));
        });
}

/// connection::read: RDMA READ `remote` into `local` (the sizes must
/// match). Completion: void(std::error_code). `local` holds the bytes when
/// the handler runs.
template <class CompletionToken>
auto async_read(connection conn, local_slice local, remote_slice remote, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, local, remote](std::stop_token stop) mutable { return conn.read(local, remote, std::move(stop)); });
}

/// connection::read scattering one remote range into several local slices
/// (copied in the call). Completion: void(std::error_code).
template <class CompletionToken>
auto async_read(connection conn, std::span<const local_slice> sg_list, remote_slice remote, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, sg = std::vector<local_slice>(sg_list.begin(), sg_list.end()), remote](std::stop_token stop) mutable {
            return conn.read(std::span<const local_slice>(sg), remote, std::move(stop));
        });
}

/// connection::fetch_add: atomically adds `add` to the 8-byte word at
/// `remote`. Completion: void(std::error_code, std::uint64_t old_value).
template <class CompletionToken>
auto async_fetch_add(connection conn, remote_slice remote, std::uint64_t add, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, remote, add](std::stop_token stop) mutable { return conn.fetch_add(remote, add, std::move(stop)); });
}

/// connection::compare_swap: replaces the word at `remote` with `swap` if it
/// equals `compare`. Completion: void(std::error_code, std::uint64_t
/// old_value) (equal to `compare` when it swapped).
template <class CompletionToken>
auto async_compare_swap(connection conn, remote_slice remote, std::uint64_t compare, std::uint64_t swap,
                        CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [conn, remote, compare, swap](std::stop_token stop) mutable {
            return conn.compare_swap(remote, compare, swap, std::move(stop));
        });
}

/// connection::close: disconnects gracefully (the peer is told, then this
/// side shuts down). Completion: void(std::error_code); no error for a
/// connection already broken or closed. Not cancellable: the goodbye is
/// bounded by the connection's own timeouts.
template <class CompletionToken>
auto async_close(connection conn, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [conn](std::stop_token) mutable { return conn.close(); }, {},
        asio::cancellation_type::none);
}

/// connection::new_connection: another queue pair to the same peer (only
/// on the side that connected). Completion: void(std::error_code,
/// connection). Not cancellable: bounded by builder::connect_timeout.
template <class CompletionToken>
auto async_new_connection(connection conn, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [conn](std::stop_token) mutable { return conn.new_connection(); }, {},
        asio::cancellation_type::none);
}

}  // namespace cordma
