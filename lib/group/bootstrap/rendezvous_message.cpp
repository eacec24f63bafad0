// The rendezvous's frames: encoders, and decoders that check every length
// against the bytes actually there and name the first field they reject.
#include "group/bootstrap/rendezvous_message.hpp"

#include <cstdio>
#include <stdexcept>

namespace cordma::detail {

namespace {

void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
    out.push_back(static_cast<std::uint8_t>(v >> 8));
    out.push_back(static_cast<std::uint8_t>(v));
}

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    put16(out, static_cast<std::uint16_t>(v >> 16));
    put16(out, static_cast<std::uint16_t>(v));
}

std::invalid_argument bad(const char* field, const std::string& why) {
    return std::invalid_argument(std::string("rendezvous frame: field '") + field + "' " + why);
}

// Reads fields front to back; every read checks that the bytes are there.
class reader {
public:
    explicit reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

    std::uint16_t u16(const char* field) {
        need(field, 2);
        auto v = static_cast<std::uint16_t>(bytes_[at_] << 8 | bytes_[at_ + 1]);
        at_ += 2;
        return v;
    }
    std::uint32_t u32(const char* field) {
        std::uint32_t high = u16(field);
        return high << 16 | u16(field);
    }
    std::span<const std::uint8_t> take(const char* field, std::size_t n) {
        need(field, n);
        auto out = bytes_.subspan(at_, n);
        at_ += n;
        return out;
    }
    // Text of 1..max printable ASCII bytes, after its u16 length.
    std::string text(const char* field, std::size_t max, bool allow_empty = false) {
        std::uint16_t length = u16(field);
        if ((length == 0 && !allow_empty) || length > max)
            throw bad(field, "has length " + std::to_string(length) + ", expected " + (allow_empty ? "0" : "1") +
                                 ".." + std::to_string(max));
        auto raw = take(field, length);
        for (std::uint8_t c : raw)
            if (c < 0x20 || c > 0x7e)
                throw bad(field, "holds a byte that is not printable ASCII (" + std::to_string(c) + ")");
        return std::string(raw.begin(), raw.end());
    }
    void finish(const char* frame) const {
        if (at_ != bytes_.size())
            throw bad(frame, "has " + std::to_string(bytes_.size() - at_) + " bytes more than its fields");
    }

private:
    void need(const char* field, std::size_t n) const {
        if (bytes_.size() - at_ < n)
            throw bad(field, "is cut short: the payload ends " + std::to_string(n - (bytes_.size() - at_)) +
                                 " bytes before it does");
    }

    std::span<const std::uint8_t> bytes_;
    std::size_t at_ = 0;
};

std::vector<std::uint8_t> frame(rendezvous_type type, std::size_t payload_size) {
    std::vector<std::uint8_t> out;
    out.reserve(rendezvous_header_size + payload_size);
    put32(out, rendezvous_magic);
    put16(out, rendezvous_version);
    out.push_back(static_cast<std::uint8_t>(type));
    out.push_back(0);
    put32(out, static_cast<std::uint32_t>(payload_size));
    return out;
}

std::uint32_t world_size_field(reader& in) {
    std::uint32_t n = in.u32("world_size");
    if (n == 0 || n > rendezvous_max_world_size)
        throw bad("world_size", "is " + std::to_string(n) + ", expected 1.." +
                                    std::to_string(rendezvous_max_world_size));
    return n;
}

}  // namespace

std::size_t rendezvous_max_payload(rendezvous_type type) noexcept {
    switch (type) {
    case rendezvous_type::publish: return 10 + rendezvous_max_endpoint;
    case rendezvous_type::status: return 4 + (rendezvous_max_world_size + 7) / 8;
    case rendezvous_type::list: return 4 + rendezvous_max_world_size * (2 + rendezvous_max_endpoint);
    case rendezvous_type::refused: return 2 + rendezvous_max_refusal;
    }
    return 0;
}

rendezvous_header decode_rendezvous_header(std::span<const std::uint8_t, rendezvous_header_size> bytes) {
    reader in(bytes);
    if (std::uint32_t magic = in.u32("magic"); magic != rendezvous_magic) {
        char text[16];
        std::snprintf(text, sizeof text, "0x%08x", magic);
        throw bad("magic", std::string("is ") + text +
                               ", expected 0x43475256 (\"CGRV\"): the peer does not speak cordma's rendezvous");
    }
    if (std::uint16_t version = in.u16("version"); version != rendezvous_version)
        throw bad("version", "is " + std::to_string(version) + ", this side speaks " +
                                 std::to_string(rendezvous_version));
    std::uint8_t type = in.take("type", 1)[0];
    if (type < 1 || type > 4)
        throw bad("type", "is " + std::to_string(type) + ", expected 1 (publish) .. 4 (refused)");
    if (std::uint8_t reserved = in.take("reserved", 1)[0]; reserved != 0)
        throw bad("reserved", "is " + std::to_string(reserved) + ", expected 0");
    rendezvous_header out{static_cast<rendezvous_type>(type), in.u32("length")};
    if (out.length > rendezvous_max_payload(out.type))
        throw bad("length", "is " + std::to_string(out.length) + ", more than this type's " +
                                std::to_string(rendezvous_max_payload(out.type)));
    return out;
}

std::vector<std::uint8_t> encode_rendezvous_publish(const rendezvous_publish& publish) {
    if (publish.endpoint.empty() || publish.endpoint.size() > rendezvous_max_endpoint)
        throw std::invalid_argument("rendezvous: endpoint '" + publish.endpoint + "' must be 1.." +
                                    std::to_string(rendezvous_max_endpoint) + " characters");
    for (char c : publish.endpoint)
        if (c < 0x20 || c > 0x7e)
            throw std::invalid_argument("rendezvous: endpoint '" + publish.endpoint +
                                        "' holds a character that is not printable ASCII");
    auto out = frame(rendezvous_type::publish, 10 + publish.endpoint.size());
    put32(out, publish.rank);
    put32(out, publish.world_size);
    put16(out, static_cast<std::uint16_t>(publish.endpoint.size()));
    out.insert(out.end(), publish.endpoint.begin(), publish.endpoint.end());
    return out;
}

std::vector<std::uint8_t> encode_rendezvous_status(const std::vector<bool>& published) {
    std::size_t bytes = (published.size() + 7) / 8;
    auto out = frame(rendezvous_type::status, 4 + bytes);
    put32(out, static_cast<std::uint32_t>(published.size()));
    std::size_t base = out.size();
    out.resize(base + bytes, 0);
    for (std::size_t r = 0; r < published.size(); ++r)
        if (published[r])
            out[base + r / 8] = static_cast<std::uint8_t>(out[base + r / 8] | 1u << (r % 8));
    return out;
}

std::vector<std::uint8_t> encode_rendezvous_list(const std::vector<std::string>& endpoints) {
    std::size_t size = 4;
    for (const auto& e : endpoints)
        size += 2 + e.size();
    auto out = frame(rendezvous_type::list, size);
    put32(out, static_cast<std::uint32_t>(endpoints.size()));
    for (const auto& e : endpoints) {
        put16(out, static_cast<std::uint16_t>(e.size()));
        out.insert(out.end(), e.begin(), e.end());
    }
    return out;
}

std::vector<std::uint8_t> encode_rendezvous_refused(const std::string& why) {
    std::string text = why.substr(0, rendezvous_max_refusal);
    for (char& c : text)
        if (c < 0x20 || c > 0x7e)
            c = '?';
    auto out = frame(rendezvous_type::refused, 2 + text.size());
    put16(out, static_cast<std::uint16_t>(text.size()));
    out.insert(out.end(), text.begin(), text.end());
    return out;
}

rendezvous_publish decode_rendezvous_publish(std::span<const std::uint8_t> payload) {
    reader in(payload);
    rendezvous_publish out;
    out.rank = in.u32("rank");
    out.world_size = world_size_field(in);
    if (out.rank >= out.world_size)
        throw bad("rank", "is " + std::to_string(out.rank) + ", not below world_size " +
                              std::to_string(out.world_size));
    out.endpoint = in.text("endpoint", rendezvous_max_endpoint);
    in.finish("publish");
    return out;
}

std::vector<bool> decode_rendezvous_status(std::span<const std::uint8_t> payload) {
    reader in(payload);
    std::uint32_t n = world_size_field(in);
    auto bits = in.take("published", (n + 7) / 8);
    in.finish("status");
    // The last byte's bits past world_size are padding, zero from the
    // encoder: set, the frame says something about ranks that do not exist.
    if (n % 8 != 0 && (bits.back() >> (n % 8)) != 0)
        throw bad("published", "has bits set past world_size " + std::to_string(n));
    std::vector<bool> out(n);
    for (std::uint32_t r = 0; r < n; ++r)
        out[r] = (bits[r / 8] >> (r % 8) & 1) != 0;
    return out;
}

std::vector<std::string> decode_rendezvous_list(std::span<const std::uint8_t> payload) {
    reader in(payload);
    std::uint32_t n = world_size_field(in);
    std::vector<std::string> out;
    out.reserve(n);
    for (std::uint32_t r = 0; r < n; ++r)
        out.push_back(in.text("endpoint", rendezvous_max_endpoint));
    in.finish("list");
    return out;
}

std::string decode_rendezvous_refused(std::span<const std::uint8_t> payload) {
    reader in(payload);
    std::string out = in.text("text", rendezvous_max_refusal, true);
    in.finish("refused");
    return out;
}

}  // namespace cordma::detail
