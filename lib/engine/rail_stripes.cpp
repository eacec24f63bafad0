#include "engine/rail_stripes.hpp"

#include <algorithm>

#include <cordma/error.hpp>

#include "engine/connection_state.hpp"
#include "engine/transport.hpp"
#include "log/logf.hpp"

namespace cordma::detail {

namespace {

/// Pieces per rail: enough for that many striped operations in flight at
/// once; past them an operation goes on rail 0 whole.
constexpr std::size_t pieces_per_rail = 16;

/// Pieces are cut on page boundaries, so each rail moves whole pages.
constexpr std::size_t piece_alignment = 4096;

bool failed(const operation_base& op) noexcept { return op.error != nullptr || op.status != IBV_WC_SUCCESS; }

/// A failure another rail may not have: anything but the peer refusing the
/// operation itself (its key or its access, which every rail shares). A
/// rail whose link is down fails with a retry error on hardware, and on
/// rxe with a local QP operation error at once; one that another rail's
/// failure shut down, with a flush or a disconnected_error.
bool rail_failure(const operation_base& op) noexcept {
    return op.status != IBV_WC_REM_ACCESS_ERR && op.status != IBV_WC_REM_INV_REQ_ERR;
}

}  // namespace

rail_stripes::rail_stripes(connection_state& primary, std::vector<std::shared_ptr<connection_state>> rails,
                           std::size_t threshold)
    : primary_(primary), rails_(std::move(rails)), threshold_(std::max(threshold, piece_alignment)) {
    std::size_t count = pieces_per_rail * (1 + rails_.size());
    pieces_ = std::make_unique<stripe_piece[]>(count);
    for (std::size_t i = count; i-- > 0;) {
        pieces_[i].owner = this;
        give_back(&pieces_[i]);
    }
    for (auto& rail : rails_)
        rail->rail_owner = this;
}

rail_stripes::~rail_stripes() {
    // A rail's state may outlive us while its flushed requests come back.
    for (auto& rail : rails_)
        rail->rail_owner = nullptr;
}

connection_state& rail_stripes::state_of(std::uint8_t rail) const noexcept {
    return rail == 0 ? primary_ : *rails_[rail - 1];
}

bool rail_stripes::usable(std::uint8_t rail, const operation_base& op) const noexcept {
    const connection_state& state = state_of(rail);
    if (state.broken())
        return false;
    if (rail == 0)
        return true;
    const auto& block = op.local[0].block();
    if (!block || block->rails <= rail || op.remote.rails <= rail)
        return false;
    // The local memory must be registered on this rail's protection domain
    // (a pool made by the same builder, or register_local_mr with its
    // rails), and the peer's on its rail.
    const protection_domain* pd = nullptr;
    if (block->pool)
        pd = block->pool->rail_pds().size() > rail ? block->pool->rail_pds()[rail].get() : nullptr;
    else if (block->rail_registrations.size() >= rail)
        pd = block->rail_registrations[rail - 1].pd().get();
    return pd != nullptr && pd == state.qp()->pd().get();
}

stripe_piece* rail_stripes::take() noexcept {
    stripe_piece* piece = free_;
    free_ = piece->next_free;
    piece->next_free = nullptr;
    --free_count_;
    return piece;
}

void rail_stripes::give_back(stripe_piece* piece) noexcept {
    piece->local[0] = local_slice{};
    piece->parent = nullptr;
    piece->next_free = free_;
    free_ = piece;
    ++free_count_;
}

void rail_stripes::aim(stripe_piece* piece, std::uint8_t rail, const remote_slice& whole) const noexcept {
    piece->rail = rail;
    piece->connection = &state_of(rail);
    piece->remote.rkey = rail == 0 ? whole.rkey : whole.rail_rkeys[rail - 1];
}

rail_stripes::outcome rail_stripes::start(operation_base* op) noexcept {
    if ((op->kind != op_kind::write && op->kind != op_kind::read) || op->sge_count != 1 || op->on_done != nullptr)
        return outcome::not_striped;
    const local_slice& whole = op->local[0];
    if (whole.size() < threshold_)
        return outcome::not_striped;
    std::array<std::uint8_t, max_rails> chosen{};
    std::size_t n = 0;
    for (std::uint8_t rail = 0; rail <= rails_.size(); ++rail)
        if (usable(rail, *op))
            chosen[n++] = rail;
    std::size_t share = (whole.size() / std::max<std::size_t>(n, 1)) & ~(piece_alignment - 1);
    if (n < 2 || free_count_ < n || share == 0)
        return outcome::not_striped;

    op->pieces_left = static_cast<std::uint8_t>(n);
    op->done = false;
    op->slot = nullptr;
    if (in_flight_ == 0)
        keep_ = primary_.shared_from_this();
    std::size_t offset = 0;
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t length = i + 1 == n ? whole.size() - offset : share;
        stripe_piece* piece = take();
        ++in_flight_;
        piece->kind = op->kind;
        piece->sge_count = 1;
        piece->local[0] = local_slice(whole.block(), whole.data() + offset, length);
        piece->remote = op->remote;
        piece->remote.address = op->remote.address + offset;
        piece->remote.length = length;
        piece->on_done = &rail_stripes::piece_done;
        piece->parent = op;
        piece->parent_ticket = op->ticket;
        piece->ticket = op->ticket;
        piece->moves = 0;
        piece->done = false;
        piece->status = IBV_WC_SUCCESS;
        piece->error = nullptr;
        piece->queued_tick = 0;
        aim(piece, chosen[i], op->remote);
        offset += length;
        if (!piece->connection->start(piece)) {
            // Failed before it was posted: recorded now, so the operation
            // is not resumed inside its own await_suspend.
            if (!op->error && op->status == IBV_WC_SUCCESS) {
                op->status = piece->status;
                op->error = piece->error;
            }
            --op->pieces_left;
            --in_flight_;
            give_back(piece);
        }
    }
    if (op->pieces_left != 0)
        return outcome::started;
    op->done = true;
    if (in_flight_ == 0)
        keep_.reset();  // the caller holds the connection: this is not the last reference
    return outcome::finished;
}

void rail_stripes::announce_down(std::uint8_t rail) noexcept {
    if (announced_[rail])
        return;
    announced_[rail] = true;
    const connection_state& state = state_of(rail);
    logf(log_level::warning, "cordma: rail %u (%s, QP %u) of the connection to %s failed: %s; its writes and reads "
                          "go on the other rails",
         static_cast<unsigned>(rail), state.qp()->pd()->device()->name().c_str(), state.qp()->qp_num(),
         primary_.peer().c_str(), state.broken_reason().c_str());
}

bool rail_stripes::move(stripe_piece* piece) noexcept {
    if (!rail_failure(*piece) || !piece->connection->broken() || piece->moves > rails_.size())
        return false;
    announce_down(piece->rail);
    operation_base& parent = *piece->parent;
    for (std::uint8_t rail = 0; rail <= rails_.size(); ++rail) {
        if (rail == piece->rail || !usable(rail, parent))
            continue;
        ++piece->moves;
        piece->done = false;
        piece->status = IBV_WC_SUCCESS;
        piece->vendor_error = 0;
        piece->error = nullptr;
        piece->queued_tick = 0;
        remote_slice target = parent.remote;
        aim(piece, rail, target);
        if (piece->connection->start(piece))
            return true;
        // Failed again before posting: try the next rail.
    }
    return false;
}

void rail_stripes::piece_done(operation_base* op) noexcept {
    auto* piece = static_cast<stripe_piece*>(op);
    rail_stripes& self = *piece->owner;
    operation_base* parent = piece->parent;
    if (parent != nullptr && failed(*piece) && self.move(piece))
        return;
    bool last = false;
    if (parent != nullptr) {
        if (failed(*piece) && !parent->error && parent->status == IBV_WC_SUCCESS) {
            parent->status = piece->status;
            parent->vendor_error = piece->vendor_error;
            parent->error = piece->error;
        }
        last = --parent->pieces_left == 0;
    }
    self.give_back(piece);
    // The last piece back lets go of the connection, after the parent is
    // resumed (which may drop every other reference).
    std::shared_ptr<connection_state> keep = --self.in_flight_ == 0 ? std::move(self.keep_) : nullptr;
    if (last) {
        parent->done = true;
        parent->wake();
    }
}

bool rail_stripes::cancel(operation_base* op, std::uint64_t ticket) noexcept {
    bool found = false;
    std::size_t count = pieces_per_rail * (1 + rails_.size());
    for (std::size_t i = 0; i < count; ++i) {
        stripe_piece& piece = pieces_[i];
        if (piece.parent != op || piece.parent_ticket != ticket)
            continue;
        found = true;
        piece.parent = nullptr;
        // One waiting for room is dropped (back at once); a posted one
        // completes on its own and only then comes back.
        if (piece.waiting) {
            piece.connection->abandon(&piece);
            give_back(&piece);
            --in_flight_;
        }
    }
    if (!found)
        return false;
    try {
        op->error = std::make_exception_ptr(operation_cancelled(to_string(op->kind), primary_.peer(),
                                                                "cancelled after it was posted; it may still take "
                                                                "effect at the peer"));
    } catch (...) {
        op->error = std::current_exception();
    }
    op->pieces_left = 0;
    op->done = true;
    std::shared_ptr<connection_state> keep = in_flight_ == 0 ? std::move(keep_) : nullptr;
    op->wake();
    return true;
}

void rail_stripes::abandon(operation_base* op) noexcept {
    std::size_t count = pieces_per_rail * (1 + rails_.size());
    for (std::size_t i = 0; i < count; ++i) {
        stripe_piece& piece = pieces_[i];
        if (piece.parent != op)
            continue;
        piece.parent = nullptr;
        if (piece.waiting) {
            piece.connection->abandon(&piece);
            give_back(&piece);
            --in_flight_;
        }
    }
    op->pieces_left = 0;
    if (in_flight_ == 0)
        keep_.reset();
}

void rail_stripes::shut_down(const std::string& why) noexcept {
    for (auto& rail : rails_)
        rail->shut_down(why);
}

bool rail_stripes::up(std::uint8_t rail) const noexcept { return !state_of(rail).broken(); }

void rail_stripes::rail_broken(const connection_state& rail) noexcept {
    std::uint8_t index = rail.rail();
    if (index == 0 || index > rails_.size() || rails_[index - 1].get() != &rail || primary_.broken())
        return;
    announce_down(index);
    if (const auto& transport = primary_.transport())
        transport->rail_down(index, generation_[index]);
}

bool rail_stripes::shut_down_rail(std::uint8_t rail, std::uint32_t generation, const std::string& why) noexcept {
    if (rail == 0 || rail > rails_.size() || generation_[rail] != generation)
        return false;
    rails_[rail - 1]->shut_down(why);
    return true;
}

void rail_stripes::admit(std::uint8_t rail, std::shared_ptr<connection_state> state,
                         std::uint32_t generation) noexcept {
    std::shared_ptr<connection_state> old = std::move(rails_[rail - 1]);
    old->rail_owner = nullptr;
    state->rail_owner = this;
    rails_[rail - 1] = std::move(state);
    generation_[rail] = generation;
    announced_[rail] = false;
    logf(log_level::info, "cordma: rail %u (%s, QP %u) of the connection to %s is back (admitted again, time %u)",
         static_cast<unsigned>(rail), rails_[rail - 1]->qp()->pd()->device()->name().c_str(),
         rails_[rail - 1]->qp()->qp_num(), primary_.peer().c_str(), static_cast<unsigned>(generation));
    // Paired with a QP the peer has replaced: its pieces, if any, move.
    old->shut_down("rail " + std::to_string(rail) + " was admitted again on a new queue pair");
}

}  // namespace cordma::detail
