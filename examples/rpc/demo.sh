#!/bin/sh
# demo.sh: run rpc_server in the background and rpc_client against it, on
# one machine with an RDMA device; exit non-zero if either fails.
#
# Usage: examples/rpc/demo.sh SERVER CLIENT [CLIENT-ARGS...]
#   SERVER, CLIENT: the rpc_server and rpc_client executables
#   (tools/run-demo passes build/examples/rpc_{server,client}).
# Env: CORDMA_TEST_ADDR or RXE_VM_ADDR: the device's IPv4 address (set by
#   tools/lib/with-device and tools/rxe-vm); RPC_PORT (default 0: any free
#   port, which the server says).
#
# Readiness, not sleeps (tools/lib/server-then-client does the waiting): the
# client starts when the server prints "listening on IP:PORT", at that
# address. The server serves one client (--clients 1) and exits when it
# leaves, so both exit on their own; every wait is bounded anyway, so a
# program that hangs fails the demo instead of hanging it: the server must
# say it listens within 30 s, gives up on a client that has not come within
# 60 s (--accept-timeout), and must exit within 30 s of the client's end;
# the client must finish within 300 s.
# POSIX sh (the helper it runs is bash).
set -u

[ $# -ge 2 ] || { echo "usage: demo.sh SERVER CLIENT [CLIENT-ARGS...]" >&2; exit 2; }
server=$1; client=$2; shift 2
ip=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$ip" ] || { echo "demo.sh: no device address: set CORDMA_TEST_ADDR (an IPv4 address of the RDMA device)" >&2; exit 2; }
address=$ip:${RPC_PORT:-0}

echo "demo.sh: rpc_server $address --clients 1 --accept-timeout 60; rpc_client once it listens"
if ! "$(dirname "$0")/../../tools/lib/server-then-client" --name demo.sh --prefix "  [server] " \
       --ready-within 30 --client-within 300 --exit-within 30 \
       -- "$server" "$address" --clients 1 --accept-timeout 60 \
       -- "$client" "{address}" "$@"; then
  echo "demo.sh: FAILED (see above)" >&2
  exit 1
fi
echo "demo.sh: rpc_client and rpc_server both finished OK"
