#!/usr/bin/env bash
# Runs the mr_exchange server and client against each other on this host's
# RDMA device (inside tools/rxe-vm: RXE_VM_ADDR; natively: CORDMA_TEST_ADDR).
# Usage: examples/mr_exchange/run.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps (tools/lib/server-then-client does the waiting): the
# server listens on any free port and prints "server: listening on
# ADDR:PORT" once it does; the client starts when that line arrives (within
# 30 s, or this fails saying so), at the address printed. Every wait is
# bounded: the server gives up on a client that has not come within 60 s,
# and once the client has finished the server has 30 s to exit.
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
exe=$build/examples/mr_exchange
[ -x "$exe" ] || { echo "run.sh: $exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }

exec "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/server-then-client" --name run.sh \
  --ready-within 30 --exit-within 30 -- "$exe" server "$addr:0" -- "$exe" client "{address}"
