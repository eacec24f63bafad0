// peer_link, receiving: taking the peer's next data or rts frame (checked
// against what the owner expects), landing or reading its payload, and
// giving its receive and credit back.
#include "link/peer_link.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <utility>

#include <cordma/error.hpp>
#include <cordma/task_group.hpp>

namespace cordma::detail {

namespace wire = link_wire;

task<inbound_frame> peer_link::take(expected_frame e, std::stop_token token) {
    auto self = shared_from_this();
    std::optional<inbound_frame> f = co_await inbox_->pop(token, receive_call_, name_);
    if (!f)
        link_gone();
    const wire::header& h = f->header;
    if (e.op != wire::op::none && (h.op != e.op || h.seq != e.seq || h.step != e.step || h.root != e.root ||
                                   h.extra != e.extra || h.size != e.size)) {
        auto core = core_.lock();
        std::string why = core ? core->mismatch(name_, describe(h), describe(e))
                               : "mismatched frames: " + name_ + " sent " + describe(h);
        if (core) {
            core->fail(std::errc::invalid_argument, why, rank_, true);
            core->throw_failure();
        }
        throw std::system_error(std::make_error_code(std::errc::invalid_argument), why);
    }
    co_return std::move(*f);
}

task<void> peer_link::fetch(const inbound_frame& f, local_slice into) {
    co_await fetch(f, 0, into);
}

task<void> peer_link::fetch(const inbound_frame& f, std::uint64_t offset, local_slice into) {
    auto self = shared_from_this();
    if (offset > f.header.size || into.size() > f.header.size - offset)
        throw std::logic_error("cordma: " + name_ + ": reading bytes " + std::to_string(offset) + " to " +
                               std::to_string(offset + into.size()) + " of a " + std::to_string(f.header.size) +
                               "-byte frame (internal error)");
    remote_slice from{f.header.addr + offset, into.size(), f.header.rkey, access_flags::remote_read};
    // The sender's keys on its rails: striped when our memory is on them too.
    from.rails = f.header.rails;
    for (std::size_t i = 0; i + 1 < f.header.rails; ++i)
        from.rail_rkeys[i] = f.header.rail_rkeys[i];
    try {
        co_await conn_.read(into, from);
    } catch (const std::exception& e) {
        std::string why = "reading " + describe(f.header) + " from " + name_ + " failed: " + e.what();
        if (auto core = core_.lock()) {
            core->fail(std::errc::connection_aborted, why, rank_, true);
            core->throw_failure();
        }
        throw;
    }
}

void peer_link::finish(inbound_frame& f) {
    if (f.header.type == wire::frame::rts)
        send_fin(f.header);
    release(f);
}

void peer_link::send_fin(const wire::header& rts) {
    wire::header fin;
    fin.type = wire::frame::fin;
    fin.op = rts.op;
    fin.seq = rts.seq;
    fin.step = rts.step;
    send_control(fin);
}

void peer_link::release(inbound_frame& f) {
    f.message.release();
    count_handled();
}

void peer_link::count_handled() {
    ++handled_;
    if (handled_ - acked_sent_ >= std::max<std::uint32_t>(1, own_window_ / 2)) {
        wire::header credit;
        credit.type = wire::frame::credit;
        send_control(credit);
    }
}

task<void> peer_link::receive(expected_frame e, local_slice into, std::stop_token token) {
    auto self = shared_from_this();
    inbound_frame f = co_await take(e, token);
    if (f.header.type == wire::frame::data) {
        if (f.header.size != 0)
            std::memcpy(into.data(), wire::payload(f.message.bytes(), f.header).data(), f.header.size);
    } else {
        co_await fetch(f, into);
    }
    finish(f);
}

}  // namespace cordma::detail
