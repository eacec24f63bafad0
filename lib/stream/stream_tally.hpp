#pragma once
/// A stream's counts (stream::statistics), written on its event listener's
/// thread and read from any; every live stream's, plus those of streams
/// gone, summed for the process's metrics pages (cordma_stream_*).

#include <cstdint>

#include <cordma/stream.hpp>

#include "engine/counter.hpp"

namespace cordma::detail {

class stream_tally {
public:
    /// Summed on the process's pages while it lives, folded into the
    /// closed sums when it goes.
    stream_tally();
    ~stream_tally();
    stream_tally(const stream_tally&) = delete;
    stream_tally& operator=(const stream_tally&) = delete;

    counter bytes_written, bytes_read, frames_sent, frames_received, credit_stalls;

    stream_statistics read() const noexcept;

    /// Every live stream's and every gone one's, summed; how many live now
    /// and how many were ever opened.
    struct process {
        stream_statistics total;
        std::uint64_t open = 0;
        std::uint64_t opened = 0;
    };
    static process process_total();
};

}  // namespace cordma::detail
