#!/usr/bin/env bash
# Runs examples/stream on this host's RDMA device (inside tools/rxe-vm:
# RXE_VM_ADDR; natively: CORDMA_TEST_ADDR):
#   1. stream_classic: a server and a client, one 40-byte request and its
#      reply, checked by the client;
#   2. stream_echo: a server for 8 clients, and 8 clients (IDs 1 to 8)
#      started together, each writing 4 MiB while it reads the echo, every
#      byte checked.
# Fails unless every process exits 0.
# Usage: examples/stream/run.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps (tools/lib/server-then-client does the waiting):
# each server listens on any free port and prints "server: listening on
# ADDR:PORT"; its clients start when that line arrives (within 30 s), at the
# address printed. Every wait is bounded: the classic client gets 60 s, the
# 8 echo clients together 180 s, and each server 30 s more to exit (5 s if
# its client failed). A peer that dies fails the other side's reads and
# writes at once; one whose host goes silent, within 10 s (peer_timeout).
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
clients=8 bytes=$((4 << 20))
# (Internal) the "client" of server-then-client below: the echo clients at
# once, failing if any fails.
if [ "$build" = --clients ]; then
  exe=$2 address=$3 pids=() rc=0
  for ((id = 1; id <= clients; id++)); do "$exe" client "$address" "$id" "$bytes" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  exit $rc
fi
for exe in stream_classic stream_echo; do
  [ -x "$build/examples/$exe" ] || { echo "run.sh: $build/examples/$exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }
done
server_then_client=$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/server-then-client

"$server_then_client" --name run.sh --ready-within 30 --client-within 60 --exit-within 30 \
  -- "$build/examples/stream_classic" server "$addr:0" -- "$build/examples/stream_classic" client "{address}"

exec "$server_then_client" --name run.sh --ready-within 30 --client-within 180 --exit-within 30 \
  -- "$build/examples/stream_echo" server "$addr:0" "$clients" -- "${BASH_SOURCE[0]}" --clients "$build/examples/stream_echo" "{address}"
