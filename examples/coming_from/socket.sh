#!/usr/bin/env bash
# Runs examples/coming_from/socket.cpp on this host's RDMA device (inside
# tools/rxe-vm: RXE_VM_ADDR; natively: CORDMA_TEST_ADDR): a server and a
# client doing the classic exchange of a socket-like communicator (an
# 18-byte message read with a 40-byte buffer, and a reply), each checking
# every byte. Fails unless both exit 0.
# Usage: examples/coming_from/socket.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps (tools/lib/server-then-client does the waiting):
# the server listens on any free port and prints "server: listening on
# ADDR:PORT"; the client starts when that line arrives (within 30 s), at
# the address printed. Every wait is bounded: the client gets 60 s, the
# server 30 s more to exit (5 s if the client failed), and each blocking
# call inside them 30 s (their own timeouts).
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "socket.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
exe=$build/examples/coming_from_socket
[ -x "$exe" ] || { echo "socket.sh: $exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }
exec "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/server-then-client" --name socket.sh \
  --ready-within 30 --client-within 60 --exit-within 30 \
  -- "$exe" server "$addr:0" -- "$exe" client "{address}"
