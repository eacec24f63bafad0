// stream_tally.hpp: the counts, the process's list of them, and the
// streams' part of the metrics pages.
#include "stream/stream_tally.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "engine/process_metrics.hpp"

namespace cordma::detail {

namespace {

struct stream_list {
    std::mutex mutex;
    std::vector<const stream_tally*> live;
    stream_statistics closed;
    std::uint64_t opened = 0;
};

// Never destroyed (a page may be asked for while statics are destroyed).
stream_list& streams() {
    static auto* list = new stream_list;
    return *list;
}

void add(stream_statistics& to, const stream_statistics& s) {
    to.bytes_written += s.bytes_written;
    to.bytes_read += s.bytes_read;
    to.frames_sent += s.frames_sent;
    to.frames_received += s.frames_received;
    to.credit_stalls += s.credit_stalls;
}

struct family {
    const char* name;
    const char* help;
    std::uint64_t stream_statistics::*field;
};

const family families[] = {
    {"cordma_stream_bytes_written_total", "Bytes handed to cordma::stream writes that returned.",
     &stream_statistics::bytes_written},
    {"cordma_stream_bytes_read_total", "Bytes returned by cordma::stream reads.", &stream_statistics::bytes_read},
    {"cordma_stream_frames_sent_total", "Data frames the process's streams sent (inline, batched or zero-copy).",
     &stream_statistics::frames_sent},
    {"cordma_stream_frames_received_total", "Data frames the process's streams took in.",
     &stream_statistics::frames_received},
    {"cordma_stream_credit_stalls_total",
     "Stream writes that waited because the reader's window (credits or send slots) was full.",
     &stream_statistics::credit_stalls},
};

void prometheus(std::string& out) {
    stream_tally::process p = stream_tally::process_total();
    if (p.opened == 0)
        return;
    prometheus_family(out, "cordma_streams", "gauge", "Streams open now.");
    out += "cordma_streams " + std::to_string(p.open) + "\n";
    prometheus_family(out, "cordma_streams_opened_total", "counter", "Streams opened (connected or accepted).");
    out += "cordma_streams_opened_total " + std::to_string(p.opened) + "\n";
    for (const family& f : families) {
        prometheus_family(out, f.name, "counter", f.help);
        out += std::string(f.name) + " " + std::to_string(p.total.*f.field) + "\n";
    }
}

void json(std::string& out) {
    stream_tally::process p = stream_tally::process_total();
    out += "\"streams\":{\"open\":" + std::to_string(p.open) + ",\"opened\":" + std::to_string(p.opened) +
           ",\"bytes_written\":" + std::to_string(p.total.bytes_written) +
           ",\"bytes_read\":" + std::to_string(p.total.bytes_read) +
           ",\"frames_sent\":" + std::to_string(p.total.frames_sent) +
           ",\"frames_received\":" + std::to_string(p.total.frames_received) +
           ",\"credit_stalls\":" + std::to_string(p.total.credit_stalls) + "}";
}

}  // namespace

stream_tally::stream_tally() {
    static std::once_flag once;
    std::call_once(once, [] { add_metrics_section({&prometheus, &json}); });
    stream_list& l = streams();
    std::lock_guard lock(l.mutex);
    l.live.push_back(this);
    ++l.opened;
}

stream_tally::~stream_tally() {
    stream_list& l = streams();
    stream_statistics last = read();
    std::lock_guard lock(l.mutex);
    auto it = std::find(l.live.begin(), l.live.end(), this);
    if (it == l.live.end())
        return;
    l.live.erase(it);
    add(l.closed, last);
}

stream_statistics stream_tally::read() const noexcept {
    stream_statistics s;
    s.bytes_written = bytes_written.get();
    s.bytes_read = bytes_read.get();
    s.frames_sent = frames_sent.get();
    s.frames_received = frames_received.get();
    s.credit_stalls = credit_stalls.get();
    return s;
}

stream_tally::process stream_tally::process_total() {
    stream_list& l = streams();
    std::lock_guard lock(l.mutex);
    process p;
    p.total = l.closed;
    for (const stream_tally* t : l.live)
        add(p.total, t->read());
    p.open = l.live.size();
    p.opened = l.opened;
    return p;
}

}  // namespace cordma::detail
