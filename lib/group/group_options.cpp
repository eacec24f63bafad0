// Placeholder until the bootstrap branch lands (it replaces this file).
#include <cordma/group.hpp>

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "group/bootstrap/group_bootstrap.hpp"

namespace cordma {

group_options group_options::from_hosts(std::vector<std::string> hosts, int rank) {
    if (hosts.empty())
        throw std::invalid_argument("cordma::group_options::from_hosts: hosts is empty");
    if (rank < 0 || static_cast<std::size_t>(rank) >= hosts.size())
        throw std::invalid_argument("cordma::group_options::from_hosts: rank " + std::to_string(rank) +
                                    " is not one of the " + std::to_string(hosts.size()) + " hosts");
    group_options o;
    o.hosts = std::move(hosts);
    o.rank = rank;
    return o;
}

group_options group_options::from_environment() {
    const char* hosts = std::getenv("CORDMA_GROUP_HOSTS");
    const char* rank = std::getenv("CORDMA_GROUP_RANK");
    if (!hosts || !rank)
        throw std::runtime_error("cordma::group_options::from_environment: CORDMA_GROUP_HOSTS and CORDMA_GROUP_RANK");
    std::vector<std::string> list;
    std::stringstream in(hosts);
    for (std::string h; std::getline(in, h, ',');)
        list.push_back(h);
    return from_hosts(std::move(list), std::atoi(rank));
}

std::string group_options::describe() const {
    if (bootstrap)
        return bootstrap->describe();
    return "host list, rank " + std::to_string(rank) + " of " + std::to_string(hosts.size());
}

}  // namespace cordma
