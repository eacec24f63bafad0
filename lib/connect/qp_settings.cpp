#include "connect/qp_settings.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "verbs/gid_table.hpp"

namespace cordma::detail {

const char* to_string(endpoint_exchange how) noexcept {
    return how == endpoint_exchange::tcp ? "tcp" : "rdma_cm";
}

namespace {

constexpr unsigned char v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool is_v4_mapped(const ibv_gid& gid) { return std::memcmp(gid.raw, v4_prefix, sizeof v4_prefix) == 0; }

std::string gid_text(const ibv_gid& gid) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.raw, text, sizeof text);
    return text;
}

std::string list(const std::vector<usable_gid>& gids) {
    if (gids.empty())
        return "none (does the port's netdev have an address of that family?)";
    std::string out;
    for (const auto& g : gids)
        out += (out.empty() ? "" : ", ") + std::to_string(g.index) + " (" + g.text + ")";
    return out;
}

[[noreturn]] void refuse(const std::string& setting, const connection_settings& s, const std::string& why) {
    throw std::invalid_argument("builder::" + setting + " over " + to_string(s.exchange) + ": " + why);
}

}  // namespace

std::vector<usable_gid> usable_gids(const device_context& device, std::uint8_t port, int family) {
    std::vector<usable_gid> out;
    ibv_port_attr attr = device.query_port(port);
    for (const ibv_gid_entry& entry :
         gid_entries(device.native_handle(), port, attr.gid_tbl_len, device.attributes().phys_port_cnt)) {
        int index = static_cast<int>(entry.gid_index);
        if (attr.link_layer == IBV_LINK_LAYER_ETHERNET && entry.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        if (attr.link_layer == IBV_LINK_LAYER_ETHERNET && (family == AF_INET) != is_v4_mapped(entry.gid))
            continue;
        out.push_back({index, gid_text(entry.gid)});
    }
    return out;
}

namespace {

/// Entry `index` of the port's GID table (one entry read), or nothing if
/// it is empty.
std::optional<ibv_gid_entry> entry_at(const device_context& device, std::uint8_t port, int index) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(device.native_handle(), port, static_cast<std::uint32_t>(index), &entry, 0) != 0)
        return std::nullopt;
    return entry;
}

/// Whether entry `index` of the port's GID table is RoCE v2 of the family
/// (IPv4-mapped or not).
bool usable_entry(const device_context& device, std::uint8_t port, const ibv_port_attr& attr, int index, bool v4) {
    auto entry = entry_at(device, port, index);
    if (!entry)
        return false;
    if (attr.link_layer != IBV_LINK_LAYER_ETHERNET)
        return true;
    return entry->gid_type == IBV_GID_TYPE_ROCE_V2 && v4 == is_v4_mapped(entry->gid);
}

[[noreturn]] void refuse_gid_index(const connection_settings& s, const device_context& device, std::uint8_t port,
                                   const ibv_port_attr& port_attr, bool v4) {
    std::vector<usable_gid> gids = usable_gids(device, port, v4 ? AF_INET : AF_INET6);
    auto wanted = "gid_index(" + std::to_string(s.gid_index) + ")";
    auto usable = "; usable " + std::string(v4 ? "IPv4" : "IPv6") + " GID indices on " + device.name() + " port " +
                  std::to_string(port) + ": " + list(gids);
    if (s.gid_index >= port_attr.gid_tbl_len)
        refuse(wanted, s, "the GID table has " + std::to_string(port_attr.gid_tbl_len) + " entries" + usable);
    auto entry = entry_at(device, port, s.gid_index);
    refuse(wanted, s,
           std::string(!entry ? "that entry is empty"
                              : entry->gid_type != IBV_GID_TYPE_ROCE_V2
                                    ? "that entry (" + gid_text(entry->gid) + ") is RoCE v1, cordma uses v2"
                                    : "that entry (" + gid_text(entry->gid) + ") is for the other address family") +
               usable);
}

/// The GID indices found for local addresses, per device and port: a storm
/// of connections would otherwise read the whole table (1,024 entries on
/// rxe) per connection and side. Each use reads the one entry again to
/// check it still holds that GID (addresses come and go), and a miss scans.
struct remembered_gid {
    const ibv_context* context = nullptr;
    std::uint8_t port = 0;
    ibv_gid gid{};
    int index = -1;
};
std::mutex remembered_mutex;
std::array<remembered_gid, 8> remembered;
std::size_t next_remembered = 0;

bool entry_holds(const device_context& device, std::uint8_t port, int index, const ibv_gid& gid) {
    auto entry = entry_at(device, port, index);
    return entry && entry->gid_type == IBV_GID_TYPE_ROCE_V2 &&
           std::memcmp(entry->gid.raw, gid.raw, sizeof gid.raw) == 0;
}

/// The remembered entry for this device, port and GID, if any (under
/// remembered_mutex). Each key is remembered once: remember() replaces it.
remembered_gid* remembered_for(const device_context& device, std::uint8_t port, const ibv_gid& gid) {
    for (auto& r : remembered)
        if (r.context == device.native_handle() && r.port == port &&
            std::memcmp(r.gid.raw, gid.raw, sizeof gid.raw) == 0)
            return &r;
    return nullptr;
}

void remember(const device_context& device, std::uint8_t port, const ibv_gid& gid, int index) {
    std::lock_guard lock(remembered_mutex);
    remembered_gid* slot = remembered_for(device, port, gid);
    if (slot == nullptr)
        slot = &remembered[next_remembered++ % remembered.size()];
    *slot = {device.native_handle(), port, gid, index};
}

/// RoCE: the GID of the local address itself (IPv4-mapped for IPv4), else
/// the first usable one of the family.
int local_gid_index(const device_context& device, std::uint8_t port, const sockaddr* local, bool v4) {
    std::optional<ibv_gid> mine;
    if (v4 && local != nullptr) {
        mine.emplace();
        mine->raw[10] = mine->raw[11] = 0xff;
        if (local->sa_family == AF_INET)
            std::memcpy(&mine->raw[12], &reinterpret_cast<const sockaddr_in*>(local)->sin_addr, 4);
        else
            std::memcpy(mine->raw, reinterpret_cast<const sockaddr_in6*>(local)->sin6_addr.s6_addr, 16);
        int known = -1;
        {
            std::lock_guard lock(remembered_mutex);
            if (const remembered_gid* r = remembered_for(device, port, *mine))
                known = r->index;
        }
        if (known >= 0 && entry_holds(device, port, known, *mine))
            return known;
    }
    std::vector<usable_gid> gids = usable_gids(device, port, v4 ? AF_INET : AF_INET6);
    if (gids.empty())
        throw std::invalid_argument("builder: no RoCE v2 " + std::string(v4 ? "IPv4" : "IPv6") + " GID on " +
                                    device.name() + " port " + std::to_string(port) +
                                    "; does its netdev have an address of that family?");
    if (!mine)
        return gids.front().index;
    std::string text = gid_text(*mine);
    for (const auto& g : gids)
        if (g.text == text) {
            remember(device, port, *mine, g.index);
            return g.index;
        }
    return gids.front().index;
}

}  // namespace

void check_rail_names(const std::vector<std::string>& devices, const std::string& call) {
    if (devices.size() < 2 || devices.size() > max_rails)
        throw std::invalid_argument(call + ": give 2 to " + std::to_string(max_rails) +
                                    " device names, rail 0 first (one rail is builder::device)");
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (devices[i].empty())
            throw std::invalid_argument(call + ": rail " + std::to_string(i) + " names no device");
        for (std::size_t j = 0; j < i; ++j)
            if (devices[j] == devices[i])
                throw std::invalid_argument(call + ": " + devices[i] + " is named twice; each rail is its own device");
    }
}

void check_handshake_settings(const connection_settings& s, handshake_side side) {
    const char* call = side == handshake_side::connecting ? "connect" : "listen";
    if (s.with_agent && !s.private_data.empty())
        throw std::invalid_argument("builder::private_data (" + std::to_string(s.private_data.size()) +
                                    " bytes) with the agent on, at " + call +
                                    ": cordma's own handshake fills the private data; private data is for plain "
                                    "connections, builder::agent(false)");
    if (side == handshake_side::connecting && s.private_data.size() > max_connect_private_data)
        throw std::invalid_argument("builder::private_data (" + std::to_string(s.private_data.size()) +
                                    " bytes), at connect: a connect request carries at most " +
                                    std::to_string(max_connect_private_data) + " bytes (" +
                                    std::to_string(max_accept_private_data) + " are for an accept, at listen)");
    if (!s.with_agent && !(s.agent == agent_limits{}))
        throw std::invalid_argument(std::string("builder::agent_limits with builder::agent(false), at ") + call +
                                    ": without an agent there is nothing to limit; drop one of the two");
    if (s.shared_receives && s.capacity.max_recv_wr != qp_capacity{}.max_recv_wr)
        throw std::invalid_argument("builder::recv_queue_depth(" + std::to_string(s.capacity.max_recv_wr) +
                                    ") with builder::shared_receives, at " + call +
                                    ": the data QP receives through the shared receive queue and has no receive "
                                    "queue of its own; size the shared_receive_queue instead, or drop one of the "
                                    "two");
    if (!s.rails.empty() && s.exchange != endpoint_exchange::tcp)
        throw std::invalid_argument(std::string("builder::rails (") + std::to_string(s.rails.size()) +
                                    " devices) over rdma_cm, at " + call +
                                    ": rails are joined over the TCP endpoint exchange for now; use "
                                    "builder::exchange(endpoint_exchange::tcp) on both sides");
    if (!s.rails.empty() && !s.device.empty() && s.device != s.rails.front())
        throw std::invalid_argument("builder::device(\"" + s.device + "\") with builder::rails, at " + call +
                                    ": rail 0 is the builder's device, and rails name \"" + s.rails.front() +
                                    "\" first; drop builder::device or name it first in builder::rails");
    if (!s.with_agent && s.agent_timeout != connection_settings{}.agent_timeout)
        throw std::invalid_argument(std::string("builder::agent_timeout with builder::agent(false), at ") + call +
                                    ": without an agent there are no agent calls to time; drop one of the two");
}

agent_limits agent_limits_for(const connection_settings& settings) {
    agent_limits limits = settings.agent;
    limits.allowed_access = limits.allowed_access & settings.remote_access;
    return limits;
}

qp_connect_options qp_options(const connection_settings& s, const device_context& device, const sockaddr* local,
                              std::uint8_t cm_port, qp_role role) {
    qp_connect_options o;
    // Port: the setting, else the port rdma_cm bound, else the first active one.
    int ports = device.attributes().phys_port_cnt;
    if (s.port != 0) {
        if (s.port > ports)
            refuse("port(" + std::to_string(s.port) + ")", s,
                   "device " + device.name() + " has " + std::to_string(ports) + " port(s)");
        if (cm_port != 0 && s.port != cm_port)
            refuse("port(" + std::to_string(s.port) + ")", s,
                   "the address is on port " + std::to_string(cm_port) + " of " + device.name() +
                       ", and rdma_cm uses the port its address lives on; use port(0) or port(" +
                       std::to_string(cm_port) + ")");
        if (device.query_port(s.port).state != IBV_PORT_ACTIVE)
            refuse("port(" + std::to_string(s.port) + ")", s, "port " + std::to_string(s.port) + " of " +
                                                                  device.name() + " is not ACTIVE");
        o.port = s.port;
    } else {
        o.port = cm_port != 0 ? cm_port : device.first_active_port();
        if (o.port == 0)
            throw std::invalid_argument("builder: device " + device.name() + " has no ACTIVE port");
    }

    // GID: the setting, validated; else the GID of the local address itself
    // (IPv4-mapped for IPv4), else any usable one of the family.
    int family = local != nullptr ? local->sa_family : AF_INET;
    bool v4 = family == AF_INET;
    if (family == AF_INET6 && local != nullptr) {
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(local);
        v4 = std::memcmp(a6->sin6_addr.s6_addr, v4_prefix, sizeof v4_prefix) == 0;
    }
    ibv_port_attr port_attr = device.query_port(o.port);
    if (s.gid_index >= 0) {
        if (s.gid_index < port_attr.gid_tbl_len && usable_entry(device, o.port, port_attr, s.gid_index, v4))
            o.gid_index = s.gid_index;
        else
            refuse_gid_index(s, device, o.port, port_attr, v4);
    } else if (port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        o.gid_index = 0;
    } else {
        o.gid_index = local_gid_index(device, o.port, local, v4);
    }

    o.mtu = s.path_mtu;
    o.timeout = s.timeout;
    o.retry_count = s.retry_count;
    o.rnr_retry = s.rnr_retry;
    o.min_rnr_timer = s.min_rnr_timer;
    o.remote_access = s.remote_access;
    return role == qp_role::control ? control_qp_options(o) : o;
}

void wait_for_receivers(builder& b) {
    if (b.settings().rnr_retry == qp_defaults::rnr_retry)
        b.rnr_retry(7);
}

}  // namespace cordma::detail
