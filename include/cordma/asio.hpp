#pragma once
/// \file
/// cordma inside Asio: every cordma operation and agent call as an Asio
/// asynchronous operation, and cordma streams as Asio streams.
///
///     asio::awaitable<void> session(cordma::connection conn, cordma::local_slice local, cordma::remote_slice remote) {
///         co_await cordma::async_write(conn, local, remote, asio::use_awaitable);
///         // resumed on this coroutine's executor, not the event listener thread
///         using namespace asio::experimental::awaitable_operators;
///         asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::seconds(1));
///         auto which = co_await (cordma::async_recv(conn, local, asio::use_awaitable) ||
///                                timer.async_wait(asio::use_awaitable));
///         // which.index() == 1: the timer fired first and the recv was cancelled
///     }
///
/// The contract every async_* function here shares (each one's comment says
/// only what differs):
/// - Completion token: any (asio::use_awaitable, a callback, asio::use_future,
///   deferred, as_tuple, asio::redirect_error, asio::bind_executor, ...).
///   The completion signature is void(std::error_code, T), or
///   void(std::error_code) for operations that yield nothing. On error, T is
///   value-initialized.
/// - Start: the cordma operation is created and started inside the
///   initiating call (for lazy tokens such as deferred, when the operation
///   is launched), on the calling thread, exactly as `co_await` of the
///   cordma call from that thread would (a first hop to the event listener
///   thread, see <cordma/connection.hpp>).
/// - Handler: never called inside the initiating call; always posted to the
///   handler's associated executor (asio::get_associated_executor: the
///   coroutine's executor for use_awaitable, the strand or io_context of
///   asio::bind_executor; asio::system_executor, Asio's system thread pool,
///   for a handler with none), never run on the event listener thread
///   unless that is its executor. Until then the operation counts as
///   outstanding work on that executor (io_context::run() does not return).
/// - Buffers: as for the cordma call (<cordma/connection.hpp>): the
///   operation shares ownership of the local regions it names until the
///   hardware is done with them, even after a cancellation; nothing the
///   caller passes needs to outlive the initiating call. Remote regions are
///   the peer's business.
/// - Errors: the std::error_code of what the cordma call throws. A
///   std::system_error becomes its code(): compare it with std::errc
///   values (`ec == std::errc::not_connected`, `== std::errc::timed_out`),
///   with cordma::errc values, or, for a failed work completion, with its
///   ibv_wc_status (`ec == IBV_WC_REM_ACCESS_ERR`; see <cordma/error.hpp>).
///   cordma::operation_cancelled becomes asio::error::operation_aborted:
///   test a cancellation with `ec == asio::error::operation_aborted`, as for
///   Asio's own operations. (Whether it also equals
///   std::errc::operation_canceled is Asio's business: 1.22's "asio.system"
///   category maps no code to std::errc, so there it does not.) A failed
///   work completion's code is in cordma's work-completion category
///   (ec == IBV_WC_REM_ACCESS_ERR); a receive posted when
///   the connection broke comes back flushed (IBV_WC_WR_FLUSH_ERR), an
///   operation started after that gets std::errc::not_connected. Invalid arguments
///   (sizes that differ, a misaligned atomic, a write into a read-only
///   grant, an empty local_slice, ...) complete with
///   std::errc::invalid_argument, and misuse (an empty connection handle, an
///   agent call on a connection without an agent, a recv while a
///   receive_queue owns the receives) with std::errc::operation_not_permitted,
///   through the handler like any error: Asio 1.22's use_awaitable
///   terminates the program if an initiation throws, so nothing here throws
///   from the initiating call (only std::bad_alloc can). An error_code
///   carries no message: cordma's texts (which call, which peer, which
///   sizes, what to do) are lost here. To see them, co_await the cordma call
///   itself (the throwing API), or use async_run, which hands over the
///   exception.
/// - Cancellation: through the handler's associated cancellation slot
///   (asio::bind_cancellation_slot, the `||` of
///   asio::experimental::awaitable_operators, a parallel_group, the
///   cancellation state of a co_spawn'ed coroutine). A cancellation of type
///   terminal or partial stops the std::stop_token the cordma call was given,
///   from whichever thread emits it: the operation completes with
///   asio::error::operation_aborted, unless it completed first (then it
///   completes as it would have). What cancellation does to work already
///   posted is cordma's (<cordma/connection.hpp>): a send, write, read or
///   atomic cancelled after posting may still take effect; a recv cancelled
///   after posting gives the message that lands in its buffer to the next
///   recv on the connection; an agent call's late answer is taken care of.
///   The connection stays up in every case: that is Asio's "partial"
///   (usable afterwards, side effects possible). Cancellation of type total
///   (no side effects at all) cannot be promised and is ignored. Operations
///   marked "not cancellable" ignore the slot.
///
/// Needs Asio (standalone, <asio.hpp>), 1.22 or later; this header and its
/// parts in <cordma/asio/> are the only ones of cordma's that include it.
/// The parts, by concern (each includes what it needs; include this one):
/// - <cordma/asio/async_cordma.hpp>: the implementation every async_*
///   function shares (the contract above).
/// - <cordma/asio/connection.hpp>: connection operations (async_send,
///   async_recv, async_write, async_read, atomics, async_close, ...).
/// - <cordma/asio/agent_calls.hpp>: agent calls (async_request_remote_mr,
///   async_send_local_mr, ...).
/// - <cordma/asio/connect.hpp>: async_accept and async_connect.
/// - <cordma/asio/run.hpp>: any cordma task (async_run).
/// - <cordma/asio/stream.hpp>: a stream as an Asio stream (asio_stream).

#include <cordma/asio/async_cordma.hpp>
#include <cordma/asio/agent_calls.hpp>
#include <cordma/asio/connect.hpp>
#include <cordma/asio/connection.hpp>
#include <cordma/asio/run.hpp>
#include <cordma/asio/stream.hpp>
