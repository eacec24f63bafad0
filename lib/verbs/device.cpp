#include <cordma/device.hpp>

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstring>

#include "verbs/check.hpp"
#include "verbs/gid_table.hpp"

namespace cordma {

namespace {

struct device_list_deleter {
    void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
using device_list = std::unique_ptr<ibv_device*[], device_list_deleter>;

// Without the kernel's RDMA support (no /sys/class/infiniband_verbs)
// ibv_get_device_list fails with ENOSYS; that means "no devices", as an
// empty list does. Any other failure is an error.
bool means_no_devices(int errno_value) { return errno_value == ENOSYS || errno_value == ENODEV || errno_value == ENOENT; }

device_list get_device_list(int& count) {
    errno = 0;
    count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) {
        int e = errno != 0 ? errno : ENODEV;
        if (means_no_devices(e)) {
            count = 0;
            return device_list();
        }
        detail::throw_verbs_error(e, "ibv_get_device_list()");
    }
    return device_list(list);
}

const char* const how_to_make_one =
    "to make a Soft-RoCE device on a host whose kernel has rdma_rxe: `sudo modprobe rdma_rxe && sudo rdma link add "
    "rxe0 type rxe netdev eth0` (eth0: the interface your peers are reached through), then check with "
    "`rdma link` and `ibv_devices`; cordma's tools/doctor says what this host lacks, and tools/rxe-vm runs a program "
    "on a VM with rxe0 where the kernel has no rdma_rxe";

[[noreturn]] void no_device(const std::string& what) {
    throw verbs_error(make_error_code(errc::no_device), what + "; " + how_to_make_one);
}

std::string join(const std::vector<std::string>& names) {
    if (names.empty())
        return "none";
    std::string out;
    for (const auto& n : names)
        out += (out.empty() ? "" : ", ") + n;
    return out;
}

bool has_active_port(ibv_context* context) {
    ibv_device_attr attr{};
    if (ibv_query_device(context, &attr) != 0)
        return false;
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr port_attr{};
        if (ibv_query_port(context, port, &port_attr) == 0 && port_attr.state == IBV_PORT_ACTIVE)
            return true;
    }
    return false;
}

}  // namespace

std::vector<std::string> device_names() {
    int count = 0;
    auto list = get_device_list(count);
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i)
        names.emplace_back(ibv_get_device_name(list[i]));
    return names;
}

// Devices are opened through librdmacm, which keeps one ibv_context per device
// for the whole process: a PD made on it can then back QPs that rdma_cm
// creates on its ids (rdma_create_qp insists on the id's own context).
std::shared_ptr<device_context> device_context::open(std::string_view name) {
    int count = 0;
    errno = 0;
    ibv_context** contexts = rdma_get_devices(&count);
    if (contexts == nullptr || count == 0) {
        int e = errno != 0 ? errno : ENODEV;
        if (contexts != nullptr)
            rdma_free_devices(contexts);
        if (!means_no_devices(e) && contexts == nullptr)
            detail::throw_verbs_error(e, "rdma_get_devices()");
        no_device(std::string("device_context::open(") + (name.empty() ? "" : "name=" + std::string(name)) +
                  "): this host has no RDMA device" +
                  (e == ENOSYS ? " (its kernel has no RDMA support loaded: ibv_get_device_list() says " +
                                     std::string(std::strerror(e)) + ")"
                               : ""));
    }
    std::unique_ptr<ibv_context*, void (*)(ibv_context**)> list(contexts, rdma_free_devices);
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
        ibv_context* context = contexts[i];
        std::string device_name = ibv_get_device_name(context->device);
        names.push_back(device_name);
        if (!name.empty() && device_name != name)
            continue;
        if (name.empty() && !has_active_port(context))
            continue;
        return std::shared_ptr<device_context>(new device_context(context, device_name));
    }
    if (!name.empty())
        no_device("device_context::open(name=" + std::string(name) + "): no such RDMA device (builder::device); "
                  "devices here: " + join(names));
    // Devices exist but none is usable: that is a port to bring up, not a
    // device to make.
    throw verbs_error(make_error_code(errc::no_device),
                      "device_context::open(): no RDMA device with an ACTIVE port; devices here: " + join(names) +
                          " (`rdma link` shows each port's state: an rxe link is ACTIVE when its netdev is up "
                          "(`ip link set eth0 up`); a hardware port needs its cable and, for InfiniBand, a subnet "
                          "manager)");
}

std::shared_ptr<device_context> device_context::from_native(ibv_context* context) {
    return std::shared_ptr<device_context>(new device_context(context, ibv_get_device_name(context->device)));
}

device_context::device_context(ibv_context* context, std::string name)
    : context_(context), name_(std::move(name)) {
    int rc = ibv_query_device(context_, &attributes_);
    if (rc != 0)
        detail::throw_verbs_error(rc, "ibv_query_device(device=" + name_ + ")");
}

// librdmacm owns the context and closes it at exit.
device_context::~device_context() = default;

ibv_port_attr device_context::query_port(std::uint8_t port) const {
    ibv_port_attr attr{};
    detail::check_errno_return(ibv_query_port(context_, port, &attr), [&] {
        return "ibv_query_port(device=" + name_ + ", port=" + std::to_string(port) + ")";
    });
    return attr;
}

std::uint8_t device_context::first_active_port() const {
    for (int port = 1; port <= attributes_.phys_port_cnt; ++port)
        if (query_port(static_cast<std::uint8_t>(port)).state == IBV_PORT_ACTIVE)
            return static_cast<std::uint8_t>(port);
    return 0;
}

ibv_gid device_context::query_gid(std::uint8_t port, int index) const {
    ibv_gid gid{};
    detail::check_errno_return(ibv_query_gid(context_, port, index, &gid), [&] {
        return "ibv_query_gid(device=" + name_ + ", port=" + std::to_string(port) +
               ", index=" + std::to_string(index) + ")";
    });
    return gid;
}

int device_context::find_gid_index(std::uint8_t port, int family) const {
    ibv_port_attr attr = query_port(port);
    if (attr.link_layer != IBV_LINK_LAYER_ETHERNET)
        return 0;
    static constexpr unsigned char v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    int link_local = -1;
    for (const ibv_gid_entry& entry : detail::gid_entries(context_, port, attr.gid_tbl_len, attributes().phys_port_cnt)) {
        int index = static_cast<int>(entry.gid_index);
        if (entry.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        const unsigned char* raw = entry.gid.raw;
        bool is_v4 = std::memcmp(raw, v4_prefix, sizeof v4_prefix) == 0;
        bool is_link_local = raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
        if (family == AF_INET && is_v4)
            return index;
        if (family == AF_INET6 && !is_v4) {
            if (!is_link_local)
                return index;
            if (link_local < 0)
                link_local = index;
        }
    }
    if (link_local >= 0)
        return link_local;
    detail::throw_verbs_error(ENOENT, "device_context::find_gid_index(device=" + name_ + ", port=" +
                                          std::to_string(port) + ", family=" +
                                          (family == AF_INET ? "inet" : "inet6") +
                                          "): no RoCE v2 GID of that family; does the port's "
                                          "netdev have an address of it?");
}

}  // namespace cordma
