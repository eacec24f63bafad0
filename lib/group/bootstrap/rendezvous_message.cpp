// The rendezvous's frames: encoders, and decoders that check every length
// against the bytes actually there and name the first field they reject.
#include "group/bootstrap/rendezvous_message.hpp"

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "wire/byte_codec.hpp"

namespace cordma::detail {

namespace {

std::invalid_argument bad(const char* field, const std::string& why) {
    return std::invalid_argument(std::string("rendezvous frame: field '") + field + "' " + why);
}

// Reads fields front to back; every read checks, by the field's name, that
// the bytes are there (the codec's own check is for this file's bugs).
class reader {
public:
    explicit reader(std::span<const std::uint8_t> bytes) : in_(bytes) {}

    std::uint16_t u16(const char* field) {
        need(field, 2);
        return in_.u16();
    }
    std::uint32_t u32(const char* field) {
        need(field, 4);
        return in_.u32();
    }
    std::uint8_t u8(const char* field) {
        need(field, 1);
        return in_.u8();
    }
    std::span<const std::uint8_t> take(const char* field, std::size_t n) {
        need(field, n);
        auto raw = in_.bytes(n);
        return {reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()};
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
        if (in_.remaining() != 0)
            throw bad(frame, "has " + std::to_string(in_.remaining()) + " bytes more than its fields");
    }

private:
    void need(const char* field, std::size_t n) const {
        if (in_.remaining() < n)
            throw bad(field, "is cut short: the payload ends " + std::to_string(n - in_.remaining()) +
                                 " bytes before it does");
    }

    byte_reader in_;
};

// A whole frame, header written; the payload's fields follow through w().
class frame_writer {
public:
    frame_writer(rendezvous_type type, std::size_t payload_size)
        : bytes_(rendezvous_header_size + payload_size), w_(bytes_) {
        w_.u32(rendezvous_magic);
        w_.u16(rendezvous_version);
        w_.u8(static_cast<std::uint8_t>(type));
        w_.zeros(1);
        w_.u32(static_cast<std::uint32_t>(payload_size));
    }
    frame_writer(const frame_writer&) = delete;
    frame_writer& operator=(const frame_writer&) = delete;

    /// The frame, once every field is written.
    std::vector<std::uint8_t> done() && {
        if (w_.written() != bytes_.size())
            throw std::logic_error("rendezvous: a frame of " + std::to_string(bytes_.size()) + " bytes got " +
                                   std::to_string(w_.written()) + " (internal error)");
        return std::move(bytes_);
    }

    byte_writer& w() noexcept { return w_; }

private:
    std::vector<std::uint8_t> bytes_;
    byte_writer w_;
};

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
    std::uint8_t type = in.u8("type");
    if (type < 1 || type > 4)
        throw bad("type", "is " + std::to_string(type) + ", expected 1 (publish) .. 4 (refused)");
    if (std::uint8_t reserved = in.u8("reserved"); reserved != 0)
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
    frame_writer out(rendezvous_type::publish, 10 + publish.endpoint.size());
    out.w().u32(publish.rank);
    out.w().u32(publish.world_size);
    out.w().u16(static_cast<std::uint16_t>(publish.endpoint.size()));
    out.w().bytes(publish.endpoint);
    return std::move(out).done();
}

std::vector<std::uint8_t> encode_rendezvous_status(const std::vector<bool>& published) {
    std::vector<std::byte> bits((published.size() + 7) / 8);
    for (std::size_t r = 0; r < published.size(); ++r)
        if (published[r])
            bits[r / 8] |= std::byte{1} << (r % 8);
    frame_writer out(rendezvous_type::status, 4 + bits.size());
    out.w().u32(static_cast<std::uint32_t>(published.size()));
    out.w().bytes(bits);
    return std::move(out).done();
}

std::vector<std::uint8_t> encode_rendezvous_list(const std::vector<std::string>& endpoints) {
    std::size_t size = 4;
    for (const auto& e : endpoints)
        size += 2 + e.size();
    frame_writer out(rendezvous_type::list, size);
    out.w().u32(static_cast<std::uint32_t>(endpoints.size()));
    for (const auto& e : endpoints) {
        out.w().u16(static_cast<std::uint16_t>(e.size()));
        out.w().bytes(e);
    }
    return std::move(out).done();
}

std::vector<std::uint8_t> encode_rendezvous_refused(const std::string& why) {
    std::string text = why.substr(0, rendezvous_max_refusal);
    for (char& c : text)
        if (c < 0x20 || c > 0x7e)
            c = '?';
    frame_writer out(rendezvous_type::refused, 2 + text.size());
    out.w().u16(static_cast<std::uint16_t>(text.size()));
    out.w().bytes(text);
    return std::move(out).done();
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
