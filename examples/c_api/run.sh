#!/usr/bin/env bash
# Runs examples/c_api's star on this host's RDMA device (inside tools/rxe-vm:
# RXE_VM_ADDR; natively: CORDMA_TEST_ADDR): a server that accepts 3 clients,
# and 3 clients (IDs 1, 2, 3) started together. Each checks every byte it
# gets; this fails unless all four exit 0.
# Usage: examples/c_api/run.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps (tools/lib/server-then-client does the waiting): the
# server listens on any free port and prints "server: listening on
# ADDR:PORT"; the clients start when that line arrives (within 30 s), at the
# address printed. Every wait is bounded: each call of the star has a 60 s
# deadline, the clients together get 120 s, and the server 30 s more to exit.
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
# (Internal) the "client" of server-then-client below: the three clients
# at once, failing if any fails.
if [ "$build" = --clients ]; then
  exe=$2 address=$3 pids=() rc=0
  for id in 1 2 3; do "$exe" client "$address" "$id" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  exit $rc
fi
exe=$build/examples/star
[ -x "$exe" ] || { echo "run.sh: $exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }

exec "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/server-then-client" --name run.sh \
  --ready-within 30 --client-within 120 --exit-within 30 \
  -- "$exe" server "$addr:0" 3 -- "${BASH_SOURCE[0]}" --clients "$exe" "{address}"
