#!/usr/bin/env bash
# The classic RPC server with 8 clients (docs/coming-from/rpc.md's program,
# coming_from_rpc) on this host's RDMA device (inside tools/rxe-vm:
# RXE_VM_ADDR; natively: CORDMA_TEST_ADDR):
#   1. one server process, listening on any free port;
#   2. 8 client processes at once, each making CALLS calls of 1 B to 20 KB
#      (across the eager size) and checking every answer byte for byte;
#   3. SIGTERM to the server, which must return from run(), say it was
#      stopped by signal 15 after 8 x CALLS calls, and exit 0.
# Fails unless every process exits 0 and the server's count is right.
# Usage: examples/coming_from/rpc.sh [BUILD-DIR [CALLS]]   (default: build 200)
#
# Readiness, not sleeps: the clients start once the server has printed
# "listening on ADDR:PORT" (polled for, at most 30 s), at that address. Every
# wait is bounded: the clients 180 s together, the server 30 s to exit after
# SIGTERM; whatever is still running then is killed (by its own pid).
set -euo pipefail
build=${1:-build} calls=${2:-200} clients=8
exe=$build/examples/coming_from_rpc
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
fail() { echo "coming_from/rpc.sh: FAIL: $*" >&2; exit 1; }
[ -n "$addr" ] || fail "no RDMA address: run it inside tools/rxe-vm, or set CORDMA_TEST_ADDR"
[ -x "$exe" ] || fail "$exe is not built (the examples need -Dexamples=enabled or auto)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/coming-from-rpc.XXXXXX")
server="" pids=()
cleanup() {
  [ -z "$server" ] || kill -KILL "$server" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# wait_exit PID SECONDS: 0 once PID has exited (its status in $rc), 1 if not within SECONDS.
wait_exit() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
  rc=0; wait "$1" || rc=$?
}

# 1. The server, until it says where it listens.
"$exe" server "$addr:0" > "$tmp/server.out" &
server=$!
deadline=$((SECONDS + 30)) address=""
while [ -z "$address" ]; do
  address=$(sed -n 's/^server: listening on \([^ ]*\).*/\1/p' "$tmp/server.out")
  [ -n "$address" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.out"; fail "the server exited before it was listening"; }
  [ "$SECONDS" -lt "$deadline" ] || fail "the server did not say it was listening within 30 s"
  sleep 0.05
done
echo "coming_from/rpc.sh: the server listens at $address; starting $clients clients of $calls calls each"

# 2. The clients, all at once.
for ((id = 1; id <= clients; id++)); do
  "$exe" client "$address" "$id" "$calls" > "$tmp/client$id.out" &
  pids+=($!)
done
failed=0 deadline=$((SECONDS + 180))
for ((id = 1; id <= clients; id++)); do
  pid=${pids[id - 1]}
  if ! wait_exit "$pid" $((deadline - SECONDS > 0 ? deadline - SECONDS : 0)); then
    echo "coming_from/rpc.sh: client $id did not finish within 180 s" >&2; failed=1; continue
  fi
  cat "$tmp/client$id.out"
  if [ "$rc" -ne 0 ]; then
    echo "coming_from/rpc.sh: client $id exited with status $rc" >&2; failed=1
  elif ! grep -qx "client $id: $calls calls, every byte right" "$tmp/client$id.out"; then
    echo "coming_from/rpc.sh: client $id exited 0 without saying every byte was right" >&2; failed=1
  fi
done
pids=()
[ "$failed" -eq 0 ] || fail "a client failed (above)"

# 3. SIGTERM ends the server's run(); it exits 0 with the count of calls.
kill -TERM "$server"
wait_exit "$server" 30 || fail "the server still runs 30 s after SIGTERM"
server=""
cat "$tmp/server.out"
[ "$rc" -eq 0 ] || fail "the server exited with status $rc after SIGTERM"
expected="server: stopped by signal 15 after $((clients * calls)) calls"
grep -qx "$expected" "$tmp/server.out" || fail "the server did not say '$expected'"
echo "coming_from/rpc.sh: $clients clients x $calls calls, every answer right; the server stopped by SIGTERM, exit 0"
