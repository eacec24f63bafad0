#!/usr/bin/env bash
# cordma::group under the real mpirun (Debian's openmpi-bin), 4 ranks on
# this host's RDMA device, no addresses given: the ranks find each other
# through PMIx (group_options::from_environment). Runs examples/mesh and
# examples/collectives; each rank checks every byte and exits non-zero on
# anything wrong, and mpirun returns the first failure.
#
# Usage: group_mpirun.sh BUILD_DIR
set -euo pipefail
build=$1
command -v mpirun >/dev/null || { echo "group_mpirun: mpirun not found (tools/install-deps installs openmpi-bin)" >&2; exit 1; }
# Root inside tools/rxe-vm: mpirun refuses root unless told; 4 ranks on
# fewer cores need --oversubscribe. Open MPI itself is not used for
# traffic here (these are not MPI programs), only its launcher and PMIx.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
device=${RXE_VM_DEVICE:-${CORDMA_TEST_DEVICE:-}}
args=()
[ -z "$device" ] || args=(--device "$device")
run() {
  echo "group_mpirun: mpirun -np 4 $*"
  timeout 240 mpirun --oversubscribe -np 4 "$@"
}
run "$build/examples/mesh" --rounds 20 --quiet "${args[@]}"
run "$build/examples/collectives" --quiet "${args[@]}"
