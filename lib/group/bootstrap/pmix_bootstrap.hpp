#pragma once
/// The PMIx bootstrap: for processes started by a PMIx launcher (Open MPI's
/// mpirun, srun --mpi=pmix, PRRTE's prterun), MPI programs or not. Every
/// rank puts its endpoint under the key "cordma.group.endpoint", a fence
/// with data collection spreads them, and each rank reads all of them back.

#include <memory>
#include <string>

#include "group/bootstrap/group_bootstrap.hpp"

namespace cordma::detail {

/// The PMIx key each rank's endpoint is published under.
inline constexpr const char* pmix_endpoint_key = "cordma.group.endpoint";

/// Calls PMIx_Init and asks for the job's size: a bootstrap when both work,
/// else null with `why_not` (if given) saying why ("PMIx_Init: UNREACHABLE
/// ...", or that cordma was built without PMIx). A launcher's PMIX_*
/// variables prove nothing (mpirun sets them for every child): only a
/// successful PMIx_Init does. Outside a launcher PMIx_Init fails at once.
std::shared_ptr<group_bootstrap> make_pmix_bootstrap(std::string* why_not = nullptr);

}  // namespace cordma::detail
