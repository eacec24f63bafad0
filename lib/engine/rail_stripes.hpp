#pragma once
/// A connection's rails 1.. (builder::rails) and the striping of its large
/// writes and reads over every rail. Each rail is a connection state of its
/// own (its QP on another device, its work slots, its metrics as role
/// "rail"); the connection's own state is rail 0. A striped operation is
/// cut into one piece per live rail, each piece an operation of its own
/// started on its rail; the operation completes when every piece has.
///
/// Pieces come from a fixed set made when the rails are attached (no
/// allocation per operation); when none is free, or the memory is not
/// registered on the rails, the operation goes on rail 0 whole. A piece
/// whose rail fails (its completion a retry or flush error, the rail's
/// state broken) is started again on another live rail: writes and reads
/// are idempotent, so doing one twice leaves the same bytes. A rail that
/// fails is reported to the connection's transport (transport::rail_down),
/// which may later admit a new QP on it (admit). Loop thread only.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cordma/rails.hpp>
#include <cordma/detail/operation.hpp>

namespace cordma::detail {

class connection_state;
class rail_stripes;

/// One rail's share of a striped write or read.
struct stripe_piece : operation_base {
    rail_stripes* owner = nullptr;
    /// The striped operation; null once it was cancelled or went away
    /// (the piece then only returns to the free set when it completes).
    operation_base* parent = nullptr;
    std::uint64_t parent_ticket = 0;
    std::uint8_t rail = 0;
    /// Times it was started again on another rail.
    std::uint8_t moves = 0;
    stripe_piece* next_free = nullptr;
};

class rail_stripes {
public:
    /// `rails`: the states of rails 1.., in order.
    rail_stripes(connection_state& primary, std::vector<std::shared_ptr<connection_state>> rails,
                 std::size_t threshold);
    ~rail_stripes();
    rail_stripes(const rail_stripes&) = delete;
    rail_stripes& operator=(const rail_stripes&) = delete;

    enum class outcome { not_striped, started, finished };
    /// `op` (a write or read on rail 0's state) cut into pieces on the live
    /// rails and started: `started`, or `finished` if every piece failed
    /// before it was posted (the caller resumes it). `not_striped`: leave
    /// it to rail 0 whole.
    outcome start(operation_base* op) noexcept;
    /// A striped `op` started with `ticket`, if it is still running: its
    /// pieces waiting for room are dropped, the posted ones detached, and
    /// it completes now with operation_cancelled. False: not one of ours.
    bool cancel(operation_base* op, std::uint64_t ticket) noexcept;
    /// `op`'s coroutine is going away: its pieces let go of it.
    void abandon(operation_base* op) noexcept;
    /// Rail 0 broke: every other rail goes too.
    void shut_down(const std::string& why) noexcept;

    /// `rail`'s state broke (connection_state::mark_broken): if it is the
    /// rail's current state and rail 0 lives on, the log says so once and
    /// the transport hears it (transport::rail_down).
    void rail_broken(const connection_state& rail) noexcept;
    /// Shuts rail `rail` down with `why` if its current state is of
    /// `generation` (the peer saw it fail); false if not (already
    /// replaced, or no such rail).
    bool shut_down_rail(std::uint8_t rail, std::uint32_t generation, const std::string& why) noexcept;
    /// `state` (a QP on rail `rail`'s device, connected to the peer's new
    /// QP there, its rail set) becomes rail `rail` as `generation`; the
    /// state it replaces is shut down (its pieces move to the others).
    void admit(std::uint8_t rail, std::shared_ptr<connection_state> state, std::uint32_t generation) noexcept;
    /// How many times rail `rail` was admitted after its first QP (0: it
    /// still runs on the QP the connection began with).
    std::uint32_t generation(std::uint8_t rail) const noexcept { return generation_[rail]; }
    /// Whether rail `rail`'s current state works.
    bool up(std::uint8_t rail) const noexcept;
    connection_state& primary() const noexcept { return primary_; }

    std::size_t threshold() const noexcept { return threshold_; }
    /// Rails 1..'s states.
    const std::vector<std::shared_ptr<connection_state>>& rails() const noexcept { return rails_; }

private:
    static void piece_done(operation_base* op) noexcept;
    connection_state& state_of(std::uint8_t rail) const noexcept;
    /// Whether `rail` can carry a piece of `op` (live, and the memory on
    /// both sides registered there).
    bool usable(std::uint8_t rail, const operation_base& op) const noexcept;
    /// Starts `piece` again on another usable rail; false if there is none.
    bool move(stripe_piece* piece) noexcept;
    /// Points `piece` at `rail`: its state, and the peer's key there.
    void aim(stripe_piece* piece, std::uint8_t rail, const remote_slice& whole) const noexcept;
    stripe_piece* take() noexcept;
    void give_back(stripe_piece* piece) noexcept;
    /// The rail's failure, said once in the log.
    void announce_down(std::uint8_t rail) noexcept;

    connection_state& primary_;
    std::vector<std::shared_ptr<connection_state>> rails_;
    std::size_t threshold_;
    std::unique_ptr<stripe_piece[]> pieces_;
    stripe_piece* free_ = nullptr;
    std::size_t free_count_ = 0;
    /// Pieces started and not yet back; the primary state is kept alive
    /// while there are any (their parents point into it).
    std::size_t in_flight_ = 0;
    std::shared_ptr<connection_state> keep_;
    std::array<bool, max_rails> announced_{};
    std::array<std::uint32_t, max_rails> generation_{};
};

}  // namespace cordma::detail
