#!/usr/bin/env bash
# Runs the mr_exchange server and client against each other on this host's
# RDMA device (inside tools/rxe-vm: RXE_VM_ADDR; natively: CORDMA_TEST_ADDR).
# Usage: examples/mr_exchange/run.sh [BUILD-DIR]      (default: build)
#
# Readiness, not sleeps: the server listens on any free port and prints
# "server: listening on ADDR:PORT" once it does; the client starts when that
# line arrives (within 30 s, or this fails saying so), at the address printed.
set -euo pipefail
build=${1:-build}
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || { echo "run.sh: no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR" >&2; exit 1; }
exe=$build/examples/mr_exchange
[ -x "$exe" ] || { echo "run.sh: $exe is not built (meson compile -C $build; the examples need -Dexamples=enabled or auto)" >&2; exit 1; }

server=""
cleanup() { [ -z "$server" ] || kill "$server" 2>/dev/null || true; }
trap cleanup EXIT
# A pipe from the server's output (a coprocess: no fifo on the filesystem,
# which 9p inside tools/rxe-vm cannot hold).
coproc SERVER { exec "$exe" server "$addr:0"; }
server=$SERVER_PID
exec 3<&"${SERVER[0]}"

listening=""
while IFS= read -r -t 30 line <&3; do
  printf '%s\n' "$line"
  case $line in
    "server: listening on "*) listening=${line#"server: listening on "}; break ;;
  esac
done
if [ -z "$listening" ]; then
  if kill -0 "$server" 2>/dev/null; then
    echo "run.sh: the server did not say it was listening within 30 s" >&2
  else
    wait "$server" || echo "run.sh: the server exited with status $? before listening (output above)" >&2
  fi
  exit 1
fi
cat <&3 &   # the rest of the server's output
relay=$!

rc=0
"$exe" client "$listening" || rc=$?
wait "$server" || rc=$?
server=""
wait "$relay" || true
exit $rc
