#pragma once
// The methods rpc_server offers and rpc_client calls: what both sides of
// the demo must agree on. Everything else (framing, matching responses to
// calls, credits, large payloads, errors) is cordma::rpc's.

#include <cstdint>

namespace demo {

enum method : std::uint32_t {
    echo = 1,   ///< the request, back
    upper = 2,  ///< the request's text in upper case
    add = 3,    ///< add_request -> add_response (typed: trivially copyable structs)
    bye = 9,    ///< the client is done (the server counts them for --clients)
};

struct add_request {
    std::int64_t a, b;
};
struct add_response {
    std::int64_t sum;
};

}  // namespace demo
