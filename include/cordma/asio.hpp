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
/// Needs Asio (standalone, <asio.hpp>), 1.22 or later; this header is the
/// only one of cordma's that includes it.

#include <exception>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/system_executor.hpp>

#include <cordma/agent_call.hpp>
#include <cordma/builder.hpp>
#include <cordma/connection.hpp>
#include <cordma/listener.hpp>
#include <cordma/stream.hpp>
#include <cordma/task.hpp>
#include <cordma/task_group.hpp>

namespace cordma {

namespace detail {

/// What co_await on a cordma awaitable yields.
template <class Awaitable>
struct awaited;
template <class Result>
struct awaited<operation<Result>> {
    using type = Result;
};
template <class T>
struct awaited<task<T>> {
    using type = T;
};
template <class Make>
using made_result_t = typename awaited<std::invoke_result_t<Make&, std::stop_token>>::type;

/// The completion signature for an operation yielding T, reporting errors
/// as Error (std::error_code or std::exception_ptr).
template <class Error, class T>
struct asio_signature {
    using type = void(Error, T);
};
template <class Error>
struct asio_signature<Error, void> {
    using type = void(Error);
};

/// The error_code a cordma call's exception completes an Asio operation
/// with (the mapping the header's comment documents).
inline std::error_code asio_error_code(const std::exception_ptr& error) noexcept {
    try {
        std::rethrow_exception(error);
    } catch (const std::system_error& e) {
        // Exactly operation_cancelled's code, not every code that compares
        // equal to the condition: Asio users test operation_aborted.
        if (e.code() == std::error_code(ECANCELED, std::generic_category()))
            return asio::error::operation_aborted;
        return e.code();
    } catch (const std::invalid_argument&) {
        return std::make_error_code(std::errc::invalid_argument);
    } catch (const std::out_of_range&) {
        return std::make_error_code(std::errc::invalid_argument);
    } catch (const std::logic_error&) {
        return std::make_error_code(std::errc::operation_not_permitted);
    } catch (const std::bad_alloc&) {
        return std::make_error_code(std::errc::not_enough_memory);
    } catch (...) {
        // cordma's calls throw nothing else; this keeps a foreign exception
        // from escaping into the event listener thread.
        return std::make_error_code(std::errc::state_not_recoverable);
    }
}

template <class Error>
Error asio_error(const std::exception_ptr& error) noexcept {
    if constexpr (std::is_same_v<Error, std::error_code>)
        return asio_error_code(error);
    else
        return error;
}

/// Installed in a handler's cancellation slot: turns the cancellation types
/// the operation honours into a stop request.
class stop_on_cancel {
public:
    stop_on_cancel(std::stop_source source, asio::cancellation_type_t honoured)
        : source_(std::move(source)), honoured_(honoured) {}
    void operator()(asio::cancellation_type_t type) {
        if ((type & honoured_) != asio::cancellation_type::none)
            source_.request_stop();
    }

private:
    std::stop_source source_;
    asio::cancellation_type_t honoured_;
};

/// Forwards a stop of the caller's own token (agent_call::stop) to the
/// operation's source, which the cancellation slot stops too.
struct stop_relay {
    std::stop_source source;
    void operator()() noexcept { source.request_stop(); }
};

/// The one implementation behind every async_* function: makes the cordma
/// awaitable with the stop token, awaits it, and posts (error, value) to
/// the handler's executor. Never throws: every failure goes to the handler.
template <class Error, class Make, class Handler, class DefaultExecutor>
task<void> run_for_asio(Make make, Handler handler, std::stop_source source, std::stop_token also,
                        DefaultExecutor default_executor) {
    using T = made_result_t<Make>;
    auto executor = asio::get_associated_executor(handler, default_executor);
    // Outstanding work, as for any Asio operation: io_context::run() must
    // not return while the RDMA side is still busy.
    auto outstanding = asio::make_work_guard(executor);
    std::stop_token token = also;
    std::optional<std::stop_callback<stop_relay>> relay;
    if (source.stop_possible()) {
        token = source.get_token();
        if (also.stop_possible())
            relay.emplace(also, stop_relay{source});
    }
    Error error{};
    if constexpr (std::is_void_v<T>) {
        try {
            co_await make(std::move(token));
        } catch (...) {
            error = asio_error<Error>(std::current_exception());
        }
        relay.reset();
        asio::post(executor, [handler = std::move(handler), error]() mutable {
            // The slot's handler holds the stop source: gone before the
            // user's handler runs, as Asio's own operations do.
            asio::get_associated_cancellation_slot(handler).clear();
            std::move(handler)(error);
        });
    } else {
        // Value-initialized, and passed so alongside an error (every T a
        // cordma call yields is default-constructible).
        T value{};
        try {
            value = co_await make(std::move(token));
        } catch (...) {
            error = asio_error<Error>(std::current_exception());
        }
        relay.reset();
        asio::post(executor, [handler = std::move(handler), error, value = std::move(value)]() mutable {
            asio::get_associated_cancellation_slot(handler).clear();
            std::move(handler)(error, std::move(value));
        });
    }
}

/// The generic initiation: `make` is a callable std::stop_token -> a cordma
/// awaitable (operation<R> or task<R>), called once, inside the initiation.
/// `also` is a stop token of the caller's (agent_call::stop) that stops the
/// operation too. `honoured` is which cancellation types stop it (none: not
/// cancellable, the slot is left alone). Handlers without an associated
/// executor run on `default_executor`.
template <class Error, class CompletionToken, class Make, class DefaultExecutor = asio::system_executor>
auto async_cordma(CompletionToken&& token, Make make, std::stop_token also = {},
                  asio::cancellation_type_t honoured = asio::cancellation_type::terminal |
                                                       asio::cancellation_type::partial,
                  DefaultExecutor default_executor = {}) {
    using signature = typename asio_signature<Error, made_result_t<Make>>::type;
    return asio::async_initiate<CompletionToken, signature>(
        [](auto handler, Make make, std::stop_token also, asio::cancellation_type_t honoured,
           DefaultExecutor default_executor) {
            std::stop_source source(std::nostopstate);
            auto slot = asio::get_associated_cancellation_slot(handler);
            if (slot.is_connected() && honoured != asio::cancellation_type::none) {
                source = std::stop_source();
                slot.template emplace<stop_on_cancel>(source, honoured);
            }
            spawn_detached(run_for_asio<Error>(std::move(make), std::move(handler), std::move(source), std::move(also),
                                               std::move(default_executor)));
        },
        token, std::move(make), std::move(also), honoured, std::move(default_executor));
}

/// An agent call as an Asio operation: `call_with(agent_call)` makes the
/// cordma task. The call gets the operation's stop token (which the slot
/// stops), and the caller's own agent_call::stop stops the operation too.
template <class CompletionToken, class CallWith>
auto async_agent_call(CompletionToken&& token, agent_call call, CallWith call_with) {
    std::stop_token also = call.stop;
    return async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [call, call_with = std::move(call_with)](std::stop_token stop) mutable {
            call.stop = std::move(stop);
            return call_with(call);
        },
        std::move(also));
}

}  // namespace detail

// ---- Connection operations --------------------------------------------------
// Each is connection's operation of the same name (<cordma/connection.hpp>)
// as an Asio asynchronous operation, under the contract at the top of this
// file. `conn` is a handle: copied, it need not outlive the call.

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

// ---- Agent calls --------------------------------------------------------------
// Each is connection's agent call of the same name. The short forms use the
// call's defaults; the long ones take its arguments. Every one that waits
// has the call's deadline (agent_call::timeout, else builder::agent_timeout):
// past it, the handler gets std::errc::timed_out. Cancelled through the
// slot, or through agent_call::stop, it completes with
// asio::error::operation_aborted, and the connection stays up (a late grant
// is released, a late region goes to the next receive).

/// connection::request_remote_mr: asks the peer's agent for `size` bytes.
/// Completion: void(std::error_code, remote_mr); a refusal by the peer (over
/// one of its agent_limits) is a std::system_error's code as the call
/// throws it.
template <class CompletionToken>
auto async_request_remote_mr(connection conn, std::size_t size, std::size_t alignment,
                             std::chrono::milliseconds lease, access_flags access, agent_call call,
                             CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, size, alignment, lease, access](agent_call c) mutable {
                                        return conn.request_remote_mr(size, alignment, lease, access, c);
                                    });
}

/// request_remote_mr with the defaults: 64-byte alignment, the peer's
/// default lease, remote read and write.
/// Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_request_remote_mr(connection conn, std::size_t size, CompletionToken&& token) {
    return async_request_remote_mr(std::move(conn), size, 64, std::chrono::milliseconds{},
                                   access_flags::remote_read | access_flags::remote_write, agent_call{},
                                   std::forward<CompletionToken>(token));
}

/// connection::send_local_mr: grants the peer `access` on `region` for
/// `lease`; `region` stays alive until the grant ends.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_local_mr(connection conn, local_slice region, std::chrono::milliseconds lease, access_flags access,
                         agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, region, lease, access](agent_call c) mutable {
                                        return conn.send_local_mr(region, lease, access, c);
                                    });
}

/// send_local_mr with the defaults: this side's default lease, remote read
/// and write. Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_local_mr(connection conn, local_slice region, CompletionToken&& token) {
    return async_send_local_mr(std::move(conn), std::move(region), std::chrono::milliseconds{},
                               access_flags::remote_read | access_flags::remote_write, agent_call{},
                               std::forward<CompletionToken>(token));
}

/// connection::receive_remote_mr: the next region the peer granted with
/// send_local_mr. Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_receive_remote_mr(connection conn, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn](agent_call c) mutable { return conn.receive_remote_mr(c); });
}

/// receive_remote_mr with the builder's agent_timeout.
/// Completion: void(std::error_code, remote_mr).
template <class CompletionToken>
auto async_receive_remote_mr(connection conn, CompletionToken&& token) {
    return async_receive_remote_mr(std::move(conn), agent_call{}, std::forward<CompletionToken>(token));
}

/// connection::send_remote_mr: hands a region the peer owns back to it.
/// `region` is moved into the operation. Completion: void(std::error_code);
/// a region whose grant already ended gives std::errc::timed_out.
template <class CompletionToken>
auto async_send_remote_mr(connection conn, remote_mr region, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn, region = std::move(region)](agent_call c) mutable {
                                        return conn.send_remote_mr(std::move(region), c);
                                    });
}

/// send_remote_mr with the builder's agent_timeout.
/// Completion: void(std::error_code).
template <class CompletionToken>
auto async_send_remote_mr(connection conn, remote_mr region, CompletionToken&& token) {
    return async_send_remote_mr(std::move(conn), std::move(region), agent_call{},
                                std::forward<CompletionToken>(token));
}

/// connection::receive_local_mr: the next of this side's regions the peer
/// handed back. Completion: void(std::error_code, local_mr).
template <class CompletionToken>
auto async_receive_local_mr(connection conn, agent_call call, CompletionToken&& token) {
    return detail::async_agent_call(std::forward<CompletionToken>(token), std::move(call),
                                    [conn](agent_call c) mutable { return conn.receive_local_mr(c); });
}

/// receive_local_mr with the builder's agent_timeout.
/// Completion: void(std::error_code, local_mr).
template <class CompletionToken>
auto async_receive_local_mr(connection conn, CompletionToken&& token) {
    return async_receive_local_mr(std::move(conn), agent_call{}, std::forward<CompletionToken>(token));
}

/// connection::revoke_local_mr: ends every grant overlapping `region` now.
/// Completion: void(std::error_code, std::size_t grants_ended). Not
/// cancellable.
template <class CompletionToken>
auto async_revoke_local_mr(connection conn, local_slice region, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [conn, region](std::stop_token) mutable { return conn.revoke_local_mr(region); }, {},
        asio::cancellation_type::none);
}

// ---- Setting up connections -----------------------------------------------

/// listener::accept: the next client, handshake done.
/// Completion: void(std::error_code, connection). Cancellable: the listener
/// goes on listening, and a client mid-handshake is left to the next
/// accept. std::errc::not_connected once the listener is closed.
template <class CompletionToken>
auto async_accept(listener l, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token), [l](std::stop_token stop) mutable { return l.accept(std::move(stop)); });
}

/// builder::connect: connects to a listener at `address` ("host:port").
/// Completion: void(std::error_code, connection). The address is parsed
/// and resolved (a blocking name lookup for a host name) and the device
/// opened inside the initiating call, on the calling thread; their errors
/// still go to the handler. Not cancellable (builder::connect takes no stop
/// token): it ends within builder::connect_timeout, with
/// std::errc::timed_out or std::errc::connection_refused. Under `||` with a
/// timer, the `||` completes only when the connect does.
template <class CompletionToken>
auto async_connect(builder b, std::string address, CompletionToken&& token) {
    return detail::async_cordma<std::error_code>(
        std::forward<CompletionToken>(token),
        [b, address](std::stop_token) mutable { return b.connect(address); }, {}, asio::cancellation_type::none);
}

// ---- Any cordma task ----------------------------------------------------------

/// Runs a cordma task as an Asio operation. Starts `work` at once on the
/// calling thread and completes `token` with (std::exception_ptr, T) (or
/// (std::exception_ptr) for task<void>) through the token's associated
/// executor, as the contract at the top of this file says. With
/// asio::use_awaitable the exception is rethrown at the co_await, whole.
/// T must be default-constructible (it is passed, empty, alongside an error).
/// Not cancellable through a slot (a task has no stop token to stop): to
/// cancel, pass the callable form below, or a std::stop_token of your own
/// to the operations inside `work`.
///
/// Why std::exception_ptr and not std::error_code, as asio::co_spawn does:
/// `work` is arbitrary code that may throw anything (a type of its own, an
/// exception whose message is the only useful part); an error_code would
/// drop it silently. For cordma's own operations, whose exceptions are all
/// std::system_error or argument errors, the async_* functions above give
/// the error_code signature Asio's idioms (redirect_error, as_tuple) expect.
template <class T, class CompletionToken>
auto async_run(task<T> work, CompletionToken&& token) {
    return detail::async_cordma<std::exception_ptr>(
        std::forward<CompletionToken>(token),
        [work = std::move(work)](std::stop_token) mutable { return std::move(work); }, {},
        asio::cancellation_type::none);
}

/// async_run for a callable std::stop_token -> task<T>, called once inside
/// the initiating call: cancellable through the handler's slot (terminal
/// and partial) by stopping the token it was given. What that does is up
/// to the task. Completion: void(std::exception_ptr, T), as above.
///
///     co_await async_run([&](std::stop_token stop) { return copy_all(conn, from, to, stop); },
///                        asio::use_awaitable);
template <class MakeTask, class CompletionToken>
    requires std::is_invocable_v<MakeTask&, std::stop_token>
auto async_run(MakeTask make, CompletionToken&& token) {
    return detail::async_cordma<std::exception_ptr>(std::forward<CompletionToken>(token), std::move(make));
}

// ---- Streams ----------------------------------------------------------------

/// A cordma::stream as an Asio AsyncReadStream and AsyncWriteStream, so
/// asio::async_read, asio::async_write and asio::async_read_until work on
/// it:
///
///     cordma::asio_stream s(std::move(stream), io.get_executor());
///     std::size_t n = co_await asio::async_read_until(s, asio::dynamic_buffer(line), '\n', asio::use_awaitable);
///
/// Handlers run on their associated executor (by default this object's),
/// never inside the initiating call. async_read_some fills the first
/// non-empty buffer of the sequence as far as what has arrived allows and
/// ends with asio::error::eof at the end of the stream; async_write_some
/// writes the first non-empty buffer whole. The buffers must stay valid
/// until the handler runs, as for any Asio stream. One read and one write
/// at a time. Errors are mapped as for the async_* functions above.
/// Cancellation through the handler's slot: a read honours terminal and
/// partial (nothing is lost: the next read goes on where it would have), a
/// write terminal only (part of the buffer may have been sent).
template <class Executor = asio::any_io_executor>
class asio_stream {
public:
    /// The executor handlers run on when they have none of their own.
    using executor_type = Executor;

    /// Takes over `s`; handlers without an associated executor run on
    /// `executor`.
    asio_stream(stream s, Executor executor) : stream_(std::move(s)), executor_(std::move(executor)) {}

    /// The executor handlers without one of their own run on.
    executor_type get_executor() const noexcept { return executor_; }
    /// The cordma stream underneath (to close it, or for its statistics).
    stream& next_layer() noexcept { return stream_; }

    /// Reads what has arrived into the first non-empty buffer of `buffers`.
    /// Completion: void(std::error_code, std::size_t bytes);
    /// asio::error::eof at the end of the stream.
    template <class MutableBufferSequence, class ReadToken>
    auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
        asio::mutable_buffer first = first_of<asio::mutable_buffer>(buffers);
        std::span<std::byte> into(static_cast<std::byte*>(first.data()), first.size());
        return detail::async_cordma<std::error_code>(
            std::forward<ReadToken>(token),
            [s = stream_, into](std::stop_token stop) mutable { return read_some(s, into, std::move(stop)); }, {},
            asio::cancellation_type::terminal | asio::cancellation_type::partial, executor_);
    }

    /// Writes the first non-empty buffer of `buffers`, whole.
    /// Completion: void(std::error_code, std::size_t bytes).
    template <class ConstBufferSequence, class WriteToken>
    auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
        asio::const_buffer first = first_of<asio::const_buffer>(buffers);
        std::span<const std::byte> from(static_cast<const std::byte*>(first.data()), first.size());
        return detail::async_cordma<std::error_code>(
            std::forward<WriteToken>(token),
            [s = stream_, from](std::stop_token stop) mutable { return written(s, from, std::move(stop)); }, {},
            asio::cancellation_type::terminal, executor_);
    }

private:
    template <class Buffer, class Sequence>
    static Buffer first_of(const Sequence& buffers) {
        for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
            Buffer b(*it);
            if (b.size() != 0)
                return b;
        }
        return Buffer();
    }

    /// A read of a non-empty buffer that returns 0 is the end of the stream.
    static task<std::size_t> read_some(stream s, std::span<std::byte> into, std::stop_token stop) {
        std::size_t n = co_await s.read(into, std::move(stop));
        if (n == 0 && !into.empty())
            throw std::system_error(asio::error::eof);
        co_return n;
    }

    static task<std::size_t> written(stream s, std::span<const std::byte> from, std::stop_token stop) {
        co_await s.write(from, std::move(stop));
        co_return from.size();
    }

    stream stream_;
    Executor executor_;
};

}  // namespace cordma
