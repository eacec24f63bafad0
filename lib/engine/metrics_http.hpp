#pragma once
/// The metrics endpoint's one exchange: a request's bytes in, the whole
/// response out (status line, headers, body). No sockets here.

#include <string>
#include <string_view>

namespace cordma::detail {

/// The response to `request` (its bytes up to the blank line): 200 with
/// the page asked for, 400 for a request that is not HTTP, 404 for another
/// path, 405 for a method other than GET or HEAD.
std::string metrics_response(std::string_view request);

}  // namespace cordma::detail
