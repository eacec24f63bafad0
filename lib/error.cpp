#include <cordma/detail/check.hpp>

namespace cordma::detail {

void throw_verbs_error(int errno_value, const std::string& call) {
    throw verbs_error(errno_value, call);
}

}  // namespace cordma::detail
