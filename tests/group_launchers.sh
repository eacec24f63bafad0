#!/usr/bin/env bash
# cordma::group started by the launchers people use, 4 ranks on this
# host's RDMA device, no addresses given (group_options::from_environment):
# 1. the real mpirun (Debian's openmpi-bin): the ranks find each other
#    through PMIx; examples/mesh and examples/collectives;
# 2. torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
#    4 processes started here as torchrun would: rank 0 serves the
#    rendezvous; examples/mesh.
# Each rank checks every byte and exits non-zero on anything wrong.
#
# Usage: group_launchers.sh BUILD_DIR
set -euo pipefail
build=$1
command -v mpirun >/dev/null || { echo "group_launchers: mpirun not found (tools/install-deps installs openmpi-bin)" >&2; exit 1; }
# Root inside tools/rxe-vm: mpirun refuses root unless told; 4 ranks on
# fewer cores need --oversubscribe. Open MPI itself is not used for
# traffic here (these are not MPI programs), only its launcher and PMIx.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# tools/rxe-vm's guest boots without a hostname ("(none)"), which mpirun
# refuses, and its root is the host's filesystem over 9p, where mpirun
# cannot make its session directory: give it both.
if [ -n "${RXE_VM:-}" ]; then
  [ "$(hostname)" != "(none)" ] || hostname rxe-vm
  export TMPDIR=/run/group-launchers
  mkdir -p "$TMPDIR"
fi
device=${RXE_VM_DEVICE:-${CORDMA_TEST_DEVICE:-}}
args=()
[ -z "$device" ] || args=(--device "$device")
run() {
  echo "group_launchers: mpirun -np 4 $*"
  timeout 240 mpirun --oversubscribe -np 4 "$@"
}
run "$build/examples/mesh" --rounds 20 --quiet "${args[@]}"
run "$build/examples/collectives" --quiet "${args[@]}"

echo "group_launchers: 4 processes with torchrun's variables"
addr=${RXE_VM_ADDR:-${CORDMA_TEST_ADDR:-127.0.0.1}}
port=$((29500 + RANDOM % 1000))
pids=()
for rank in 3 2 1 0; do   # rank 0, the rendezvous, last: the others wait for it
  RANK=$rank WORLD_SIZE=4 MASTER_ADDR=$addr MASTER_PORT=$port \
    timeout 240 "$build/examples/mesh" --rounds 20 --quiet "${args[@]}" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
