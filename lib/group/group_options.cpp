// group_options' factories: a host list, or whatever launcher started this
// process (PMIx, torchrun's variables, CORDMA_GROUP_HOSTS), in the order
// group.hpp documents; and describe(), for logs.
#include <cordma/address.hpp>
#include <cordma/group.hpp>

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "group/bootstrap/group_bootstrap.hpp"
#include "group/bootstrap/pmix_bootstrap.hpp"
#include "group/bootstrap/rendezvous_bootstrap.hpp"

namespace cordma {

namespace {

const char* env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
}

// A whole decimal int, or throws naming the variable.
int env_int(const char* name, const char* value) {
    int out = 0;
    std::string_view text(value);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc() || end != text.data() + text.size())
        throw std::runtime_error(std::string("group_options::from_environment: ") + name + "='" + value +
                                 "' is not a whole number");
    return out;
}

// "A, B and C".
std::string join_and(const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i)
        out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return out;
}

std::vector<std::string> split_hosts(std::string_view text) {
    std::vector<std::string> out;
    while (true) {
        auto comma = text.find(',');
        std::string_view item = text.substr(0, comma);
        while (!item.empty() && (item.front() == ' ' || item.front() == '\t'))
            item.remove_prefix(1);
        while (!item.empty() && (item.back() == ' ' || item.back() == '\t'))
            item.remove_suffix(1);
        out.emplace_back(item);
        if (comma == std::string_view::npos)
            return out;
        text.remove_prefix(comma + 1);
    }
}

// torchrun's four variables: null when none is set; a bootstrap when all
// are; else what is missing.
std::shared_ptr<detail::group_bootstrap> from_torchrun() {
    static constexpr const char* names[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    std::vector<std::string> found, missing;
    for (const char* name : names) {
        if (const char* value = env(name))
            found.push_back(std::string(name) + "=" + value);
        else
            missing.push_back(name);
    }
    if (found.empty())
        return nullptr;
    if (!missing.empty())
        throw std::runtime_error("group_options::from_environment: a torchrun-style launch needs RANK, WORLD_SIZE, "
                                 "MASTER_ADDR and MASTER_PORT: " +
                                 join_and(found) + (found.size() > 1 ? " are" : " is") + " set but " +
                                 join_and(missing) + (missing.size() > 1 ? " are" : " is") + " not");
    int rank = env_int("RANK", env("RANK"));
    int world_size = env_int("WORLD_SIZE", env("WORLD_SIZE"));
    std::string master = env("MASTER_ADDR");
    // MASTER_ADDR is a bare host (an IPv6 one without brackets, too).
    bool v6 = master.find(':') != std::string::npos && master.front() != '[';
    host_port where;
    try {
        where = parse_address((v6 ? "[" + master + "]" : master) + ":" + env("MASTER_PORT"));
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string("group_options::from_environment: MASTER_ADDR/MASTER_PORT: ") +
                                 e.what());
    }
    try {
        return std::make_shared<detail::rendezvous_bootstrap>(rank, world_size, std::move(where));
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string("group_options::from_environment: ") + e.what());
    }
}

}  // namespace

group_options group_options::from_hosts(std::vector<std::string> hosts, int rank) {
    if (hosts.empty())
        throw std::invalid_argument("group_options::from_hosts: argument 'hosts' is empty: give every rank's "
                                    "endpoint, \"host:port\", index = rank");
    if (rank < 0 || static_cast<std::size_t>(rank) >= hosts.size())
        throw std::invalid_argument("group_options::from_hosts: argument 'rank' is " + std::to_string(rank) +
                                    ", not in 0.." + std::to_string(hosts.size() - 1) + " ('hosts' has " +
                                    std::to_string(hosts.size()) + " endpoints)");
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        try {
            parse_address(hosts[i]);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("group_options::from_hosts: argument 'hosts', entry " + std::to_string(i) +
                                        " (rank " + std::to_string(i) + "): " + e.what());
        }
    }
    group_options out;
    out.rank = rank;
    out.hosts = std::move(hosts);
    return out;
}

group_options group_options::from_environment() {
    group_options out;
    std::string pmix_why_not;
    if (auto pmix = detail::make_pmix_bootstrap(&pmix_why_not)) {
        out.rank = pmix->rank();
        out.bootstrap = std::move(pmix);
    } else if (auto torchrun = from_torchrun()) {
        out.rank = torchrun->rank();
        out.bootstrap = std::move(torchrun);
    } else {
        const char* hosts = env("CORDMA_GROUP_HOSTS");
        const char* rank = env("CORDMA_GROUP_RANK");
        if (hosts == nullptr && rank == nullptr) {
            // Say what each launcher would need; and why PMIx did not work
            // when its variables suggest it should have.
            bool pmix_vars = env("PMIX_RANK") != nullptr || env("PMIX_NAMESPACE") != nullptr;
            throw std::runtime_error(
                "group_options::from_environment: no launcher found. PMIx (mpirun, srun --mpi=pmix, prterun): " +
                pmix_why_not + (pmix_vars ? " although PMIX_RANK or PMIX_NAMESPACE is set" : "") +
                ". torchrun: set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. A host list: set "
                "CORDMA_GROUP_HOSTS=host:port,host:port,... and CORDMA_GROUP_RANK. Or use "
                "group_options::from_hosts");
        }
        if (hosts == nullptr || rank == nullptr)
            throw std::runtime_error(std::string("group_options::from_environment: ") +
                                     (hosts ? "CORDMA_GROUP_HOSTS is set but CORDMA_GROUP_RANK is not"
                                            : "CORDMA_GROUP_RANK=" + std::string(rank) +
                                                  " is set but CORDMA_GROUP_HOSTS (comma-separated host:port "
                                                  "endpoints, index = rank) is not"));
        try {
            out = from_hosts(split_hosts(hosts), env_int("CORDMA_GROUP_RANK", rank));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string("group_options::from_environment: CORDMA_GROUP_HOSTS and "
                                                 "CORDMA_GROUP_RANK: ") +
                                     e.what());
        }
    }
    if (const char* address = env("CORDMA_GROUP_ADDRESS")) {
        try {
            parse_address(address, 1, true);  // "ip" or "ip:port"; only the syntax is checked here
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string("group_options::from_environment: CORDMA_GROUP_ADDRESS: ") +
                                     e.what());
        }
        out.listen_address = address;
    }
    return out;
}

std::string group_options::describe() const {
    if (bootstrap)
        return bootstrap->describe();
    if (hosts.empty())
        return "no endpoints (neither a host list nor a launcher: use from_hosts or from_environment)";
    return "host list (rank " + std::to_string(rank) + " of " + std::to_string(hosts.size()) + ")";
}

}  // namespace cordma
