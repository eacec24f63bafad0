#include <cordma/listener.hpp>

#include <stdexcept>

#include "connect/acceptor.hpp"

namespace cordma {

namespace {

detail::acceptor& checked(const std::shared_ptr<detail::acceptor>& impl, const char* call) {
    if (!impl)
        throw std::logic_error(std::string("listener::") + call +
                               ": an empty listener (default-constructed or moved from); get one from builder::listen");
    return *impl;
}

}  // namespace

task<connection> listener::accept(std::stop_token token) { return checked(impl_, "accept").accept(std::move(token)); }

void listener::close() { checked(impl_, "close").close(); }

const std::string& listener::address() const { return checked(impl_, "address").address(); }

}  // namespace cordma
