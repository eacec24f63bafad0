#!/bin/sh
# demo.sh: run rpc_server in the background and rpc_client against it, on
# one machine with an RDMA device; exit non-zero if either fails.
#
# Usage: examples/rpc/demo.sh SERVER CLIENT [CLIENT-ARGS...]
#   SERVER, CLIENT: the rpc_server and rpc_client executables
#   (tools/run-demo passes build/examples/rpc_{server,client}).
# Env: CORDMA_TEST_ADDR or RXE_VM_ADDR: the device's IPv4 address (set by
#   tools/lib/with-device and tools/rxe-vm); RPC_PORT (default 7471).
#
# The server serves one client (--clients 1) and exits when it leaves, so
# both exit on their own; the waits below are bounded anyway, so a hung
# program fails the demo instead of hanging it.
# POSIX sh: inside tools/rxe-vm it runs under the guest's /bin/sh.
set -u

[ $# -ge 2 ] || { echo "usage: demo.sh SERVER CLIENT [CLIENT-ARGS...]" >&2; exit 2; }
server=$1; client=$2; shift 2
ip=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$ip" ] || { echo "demo.sh: no device address: set CORDMA_TEST_ADDR (an IPv4 address of the RDMA device)" >&2; exit 2; }
address=$ip:${RPC_PORT:-7471}

dir=$(mktemp -d "${TMPDIR:-/tmp}/rpc_demo.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

# The server in the background, its output shown as it comes ([server]) and
# kept in $dir/log to see when it listens; its pid and status go to files.
(
  "$server" "$address" --clients 1 2>&1 &
  echo $! > "$dir/pid"
  wait $!
  echo $? > "$dir/status"
) | tee "$dir/log" | sed -u 's/^/  [server] /' &
output_pid=$!

server_pid() { cat "$dir/pid" 2>/dev/null; }
server_running() { pid=$(server_pid); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

# Wait (up to 30 s) until it listens, or dies trying.
tries=0
until grep -q "listening on" "$dir/log" 2>/dev/null; do
  if [ -f "$dir/status" ] || [ "$tries" -ge 300 ]; then
    server_running && kill "$(server_pid)"
    wait "$output_pid"
    echo "demo.sh: rpc_server did not start listening on $address (status $(cat "$dir/status" 2>/dev/null))" >&2
    exit 1
  fi
  tries=$((tries + 1)); sleep 0.1
done

echo "demo.sh: rpc_client $address $*"
client_rc=0
timeout 300 "$client" "$address" "$@" || client_rc=$?
[ "$client_rc" -ne 124 ] || echo "demo.sh: rpc_client did not finish within 300 s" >&2

# The server exits once its client has gone; give it 30 s. (A client that
# failed may never have connected: then there is nothing to wait for.)
tries=0
[ "$client_rc" -eq 0 ] || tries=300
while server_running && [ "$tries" -lt 300 ]; do
  tries=$((tries + 1)); sleep 0.1
done
if server_running; then
  [ "$client_rc" -ne 0 ] || echo "demo.sh: rpc_server still running 30 s after the client finished; stopping it" >&2
  kill "$(server_pid)"
fi
wait "$output_pid"
server_rc=$(cat "$dir/status" 2>/dev/null || echo "unknown")

if [ "$client_rc" -ne 0 ] || [ "$server_rc" != 0 ]; then
  echo "demo.sh: FAILED: rpc_client status $client_rc, rpc_server status $server_rc" >&2
  exit 1
fi
echo "demo.sh: rpc_client and rpc_server both finished OK"
