# Inside tools/rxe-vm -n 2: every kind of operation and every module at once
# between two hosts, under the netem fault in $NETEM (on both hosts' eth0).
# Host 1 serves: fault_peer (verbs and agent), stream_peer, rpc_server and
# rank 0 of examples/collectives; host 2 runs their clients and rank 1.
# Every process must exit 0: every byte checked, no error surfaced.
# Env: BUILD (the build directory), SRC, NETEM, SECONDS_OF_TRAFFIC, STREAM_BYTES, RPC_CALLS.
set -u
. "$SRC/tests/faults/lib.sh"
cd "$BUILD"
logs=$(mktemp -d "$BUILD/faults-mixed.XXXXXX")
if [ -n "${NETEM:-}" ]; then
  tc qdisc add dev eth0 root netem $NETEM || die "tc qdisc add dev eth0 root netem $NETEM"
  say "eth0: $(tc qdisc show dev eth0)"
fi
ranks=10.78.0.1:7600,10.78.0.2:7600
if [ "$RXE_VM_HOST" = 1 ]; then
  examples/collectives --rank 0 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
  tests/stream_peer serve 10.78.0.1:7610 "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
  examples/rpc_server 10.78.0.1:7630 --clients 1 > "$logs/rpc" 2>&1 & rpc=$!
  tests/fault_peer serve 10.78.0.1:7620 --clients 4 > "$logs/fault" 2>&1 & flt=$!
  wait_line "$logs/stream" "listening on" 60
  wait_line "$logs/rpc" "listening on" 60
  wait_line "$logs/fault" "listening on" 60
  gate_open 7699
  say "every server listens"
  finish "fault_peer serve" $flt; finish "stream_peer serve" $strm; finish "rpc_server" $rpc; finish "collectives rank 0" $coll
  gate_close
else
  examples/collectives --rank 1 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
  gate_wait 10.78.0.1 7699 120
  tests/fault_peer traffic 10.78.0.1:7620 --seconds "$SECONDS_OF_TRAFFIC" > "$logs/fault" 2>&1 & flt=$!
  tests/stream_peer connect 10.78.0.1:7610 "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
  examples/rpc_client 10.78.0.1:7630 --calls "$RPC_CALLS" --depth 16 --connect-timeout 60 > "$logs/rpc" 2>&1 & rpc=$!
  finish "fault_peer traffic" $flt; finish "stream_peer connect" $strm; finish "rpc_client" $rpc; finish "collectives rank 1" $coll
fi
for f in "$logs"/*; do sed "s/^/  $(basename "$f"): /" "$f" | tail -n 25; done
[ -z "${NETEM:-}" ] || { say "eth0 after: $(tc -s qdisc show dev eth0 | tr '\n' ' ')"; }
rm -rf "$logs"
[ "$failures" -eq 0 ] || die "$failures process(es) failed"
say "all passed"
