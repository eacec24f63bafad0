# Inside tools/rxe-vm -n 2: every kind of operation and every module at once
# between two hosts, under the netem fault in $NETEM (on both hosts' eth0).
# Host 1 serves: fault_peer (verbs and agent), stream_peer, rpc_server and
# rank 0 of examples/collectives; host 2 runs their clients and rank 1.
# Every process must exit 0: every byte checked, no error surfaced.
# STARVE=S: no netem; instead each host is loaded (a busy loop beside the
# test's processes on its one vCPU) and, 50 messages into fault_peer's
# traffic, every server process on host 1 is stopped (SIGSTOP) for S
# seconds, then continued: a slow live peer, which no client may take for
# a dead one (their devices still acknowledge; the modules' keepalives
# allow 10 s).
# Env: BUILD (the build directory), SRC, NETEM, STARVE, SECONDS_OF_TRAFFIC, STREAM_BYTES, RPC_CALLS.
set -u
. "$SRC/tests/faults/lib.sh"
cd "$BUILD"
logs=$(mktemp -d "$BUILD/faults-mixed.XXXXXX")
if [ -n "${NETEM:-}" ]; then
  tc qdisc add dev eth0 root netem $NETEM || die "tc qdisc add dev eth0 root netem $NETEM"
  say "eth0: $(tc qdisc show dev eth0)"
fi
ranks=10.78.0.1:7600,10.78.0.2:7600
busy=""
if [ -n "${STARVE:-}" ]; then
  yes > /dev/null & busy=$!
  say "loaded: a busy loop (pid $busy) shares this host's CPU"
fi
if [ "$RXE_VM_HOST" = 1 ]; then
  examples/collectives --rank 0 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
  tests/stream_peer serve 10.78.0.1:7610 "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
  examples/rpc_server 10.78.0.1:7630 --clients 1 > "$logs/rpc" 2>&1 & rpc=$!
  if [ -n "${STARVE:-}" ]; then
    # $PPID in the fault command is fault_peer itself (it runs the command).
    # (A server already done, the collectives' rank most often, is left out.)
    stop="s=; for p in $coll $strm $rpc \$PPID; do kill -STOP \$p 2>/dev/null && s=\"\$s \$p\"; done; echo stopped\$s for $STARVE s"
    cont="kill -CONT \$s; echo continued every server"
    tests/fault_peer serve 10.78.0.1:7620 --clients 4 --fault-after 50 \
      --fault "$stop; sleep $STARVE; $cont" > "$logs/fault" 2>&1 & flt=$!
  else
    tests/fault_peer serve 10.78.0.1:7620 --clients 4 > "$logs/fault" 2>&1 & flt=$!
  fi
  wait_line "$logs/stream" "listening on" 60
  wait_line "$logs/rpc" "listening on" 60
  wait_line "$logs/fault" "listening on" 60
  gate_open 7699
  say "every server listens"
  finish "fault_peer serve" $flt; finish "stream_peer serve" $strm; finish "rpc_server" $rpc; finish "collectives rank 0" $coll
  gate_close
  if [ -n "${STARVE:-}" ]; then
    grep -q "continued every server" "$logs/fault" || { say "FAILED: the servers were never stopped and continued"; failures=$((failures + 1)); }
  fi
else
  examples/collectives --rank 1 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
  gate_wait 10.78.0.1 7699 120
  tests/fault_peer traffic 10.78.0.1:7620 --seconds "$SECONDS_OF_TRAFFIC" > "$logs/fault" 2>&1 & flt=$!
  tests/stream_peer connect 10.78.0.1:7610 "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
  examples/rpc_client 10.78.0.1:7630 --calls "$RPC_CALLS" --depth 16 --connect-timeout 60 > "$logs/rpc" 2>&1 & rpc=$!
  finish "fault_peer traffic" $flt; finish "stream_peer connect" $strm; finish "rpc_client" $rpc; finish "collectives rank 1" $coll
fi
[ -z "$busy" ] || kill "$busy"
for f in "$logs"/*; do sed "s/^/  $(basename "$f"): /" "$f" | tail -n 25; done
[ -z "${NETEM:-}" ] || { say "eth0 after: $(tc -s qdisc show dev eth0 | tr '\n' ' ')"; }
rm -rf "$logs"
[ "$failures" -eq 0 ] || die "$failures process(es) failed"
say "all passed"
