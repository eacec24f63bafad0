#!/usr/bin/env bash
# Runs examples/rpc on this host's RDMA device (inside tools/rxe-vm:
# RXE_VM_ADDR; natively: CORDMA_TEST_ADDR):
#   1. the demo (demo.sh): rpc_server for one client, rpc_client making
#      5,000 pipelined calls (echo, upper, add; 1 B to 64 KiB), each checked;
#   2. rpc_classic: the server with a handler class, and a client making
#      blocking calls, each checked.
# Fails unless every process exits 0.
# Usage: examples/rpc/run.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps (tools/lib/server-then-client): each server listens
# on any free port and prints "listening on ADDR:PORT"; its client starts
# when that line arrives (within 30 s). Every wait is bounded.
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
for exe in rpc_server rpc_client rpc_classic; do
  [ -x "$build/examples/$exe" ] || { echo "run.sh: $build/examples/$exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }
done
here=$(dirname "${BASH_SOURCE[0]}")

CORDMA_TEST_ADDR=$addr "$here/demo.sh" "$build/examples/rpc_server" "$build/examples/rpc_client" --calls 5000 --depth 32

exec "$here/../../tools/lib/server-then-client" --name run.sh --ready-within 30 --client-within 60 --exit-within 30 \
  -- "$build/examples/rpc_classic" server "$addr:0" -- "$build/examples/rpc_classic" client "{address}"
