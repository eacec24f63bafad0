# Inside tools/rxe-vm -n 2: every kind of operation and every module at once
# between two hosts, in one or more phases, each under its own fault.
# Host 1 serves: fault_peer (verbs and agent), stream_peer, rpc_server and
# rank 0 of examples/collectives; host 2 runs their clients and rank 1.
# Every process must exit 0: every byte checked, no error surfaced.
# PHASES: a space-separated list of phases, run in order in this one boot
# (a boot costs about 20 s of CI; the hosts that carried one phase carry
# the next, as a long-running program's would):
#   loss     netem limit 64 loss 5% on both hosts' eth0; the device's own
#            counters (read by fault_peer traffic) must show retransmissions
#   reorder  netem loss 1% delay 20ms reorder 5% 50%
#   starve   no netem; instead each host is loaded (a busy loop beside the
#            test's processes on its one vCPU) and, 50 messages into
#            fault_peer's traffic, every server process on host 1 is
#            stopped (SIGSTOP) for 4 s, then continued: a slow live peer,
#            which no client may take for a dead one (their devices still
#            acknowledge; the modules' keepalives allow 10 s)
# Each phase listens on its own ports (7600 + 100 x its index) and opens its
# own readiness gate, so no client of one phase can reach a server of
# another. A phase that fails stops the run.
# Env: BUILD (the build directory), SRC, PHASES, SECONDS_OF_TRAFFIC, STREAM_BYTES, RPC_CALLS.
set -u
. "$SRC/tests/faults/lib.sh"
cd "$BUILD"

# netem's queue holds 64 packets, not its default 1,000: on this emulated
# link (about 10 MB/s) 1,000 packets of 4 KiB are 0.4 s of queueing, more
# than RC's 7 ACK timeouts of 67 ms, so a retried READ waited behind the
# retransmissions of every other QP and its QP gave up (retry counter
# exceeded; 1 in 5 runs). A real switch port buffers microseconds, not
# seconds; 64 packets are about 25 ms here.
netem_of() {
  case "$1" in
    loss) echo "limit 64 loss 5%" ;;
    reorder) echo "loss 1% delay 20ms reorder 5% 50%" ;;
    starve) echo "" ;;
    *) die "unknown phase '$1' (loss, reorder or starve)" ;;
  esac
}

phase() {  # NAME INDEX
  local name=$1 base=$((7600 + 100 * $2)) netem starve="" busy="" logs coll strm rpc flt
  netem=$(netem_of "$name")
  [ "$name" != starve ] || starve=4
  say "phase $name: ports $base-$((base + 99))"
  logs=$(mktemp -d "$BUILD/faults-mixed.XXXXXX")
  tc qdisc del dev eth0 root 2>/dev/null
  if [ -n "$netem" ]; then
    tc qdisc add dev eth0 root netem $netem || die "tc qdisc add dev eth0 root netem $netem"
    say "eth0: $(tc qdisc show dev eth0)"
  fi
  local ranks=10.78.0.1:$base,10.78.0.2:$base gate=$((base + 99))
  if [ -n "$starve" ]; then
    yes > /dev/null & busy=$!
    say "loaded: a busy loop (pid $busy) shares this host's CPU"
  fi
  failures=0
  if [ "$RXE_VM_HOST" = 1 ]; then
    examples/collectives --rank 0 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
    tests/stream_peer serve 10.78.0.1:$((base + 10)) "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
    examples/rpc_server 10.78.0.1:$((base + 30)) --clients 1 > "$logs/rpc" 2>&1 & rpc=$!
    if [ -n "$starve" ]; then
      # $PPID in the fault command is fault_peer itself (it runs the command).
      # (A server already done, the collectives' rank most often, is left out.)
      local stop cont
      stop="s=; for p in $coll $strm $rpc \$PPID; do kill -STOP \$p 2>/dev/null && s=\"\$s \$p\"; done; echo stopped\$s for $starve s"
      cont="kill -CONT \$s; echo continued every server"
      tests/fault_peer serve 10.78.0.1:$((base + 20)) --clients 4 --fault-after 50 \
        --fault "$stop; sleep $starve; $cont" > "$logs/fault" 2>&1 & flt=$!
    else
      tests/fault_peer serve 10.78.0.1:$((base + 20)) --clients 4 > "$logs/fault" 2>&1 & flt=$!
    fi
    wait_line "$logs/stream" "listening on" 60
    wait_line "$logs/rpc" "listening on" 60
    wait_line "$logs/fault" "listening on" 60
    gate_open $gate
    say "phase $name: every server listens"
    finish "fault_peer serve" $flt; finish "stream_peer serve" $strm; finish "rpc_server" $rpc; finish "collectives rank 0" $coll
    gate_close
    if [ -n "$starve" ]; then
      grep -q "continued every server" "$logs/fault" || { say "FAILED: the servers were never stopped and continued"; failures=$((failures + 1)); }
    fi
  else
    examples/collectives --rank 1 --hosts $ranks --quiet --device rxe0 > "$logs/collectives" 2>&1 & coll=$!
    gate_wait 10.78.0.1 $gate 120
    # Under loss the device must have counted the retransmissions that
    # recovered it (its hw_counters, read through cordma).
    local expect=""
    [ "$name" != loss ] || expect=--expect-retransmissions
    tests/fault_peer traffic 10.78.0.1:$((base + 20)) --seconds "$SECONDS_OF_TRAFFIC" $expect > "$logs/fault" 2>&1 & flt=$!
    tests/stream_peer connect 10.78.0.1:$((base + 10)) "$STREAM_BYTES" > "$logs/stream" 2>&1 & strm=$!
    examples/rpc_client 10.78.0.1:$((base + 30)) --calls "$RPC_CALLS" --depth 16 --connect-timeout 60 > "$logs/rpc" 2>&1 & rpc=$!
    finish "fault_peer traffic" $flt; finish "stream_peer connect" $strm; finish "rpc_client" $rpc; finish "collectives rank 1" $coll
  fi
  [ -z "$busy" ] || kill "$busy"
  for f in "$logs"/*; do sed "s/^/  $name $(basename "$f"): /" "$f" | tail -n 25; done
  [ -z "$netem" ] || { say "eth0 after: $(tc -s qdisc show dev eth0 | tr '\n' ' ')"; }
  tc qdisc del dev eth0 root 2>/dev/null
  rm -rf "$logs"
  [ "$failures" -eq 0 ] || die "phase $name: $failures process(es) failed"
  say "phase $name: all passed"
}

index=0
for name in $PHASES; do
  phase "$name" "$index"
  index=$((index + 1))
done
say "all passed: $PHASES"
