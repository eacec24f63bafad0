#!/bin/sh
# Runs the mr_exchange server and client against each other on this host's
# RDMA device (inside tools/rxe-vm: RXE_VM_ADDR; natively: CORDMA_TEST_ADDR).
# Usage: examples/mr_exchange/run.sh [BUILD-DIR]      (default: build)
set -eu
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
exe=$build/examples/mr_exchange
[ -x "$exe" ] || { echo "run.sh: $exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }
"$exe" server "$addr:7472" &
server=$!
sleep 1
rc=0
"$exe" client "$addr:7472" || rc=$?
wait $server || rc=$?
exit $rc
