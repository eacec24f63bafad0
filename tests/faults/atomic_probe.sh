#!/bin/sh
# Runs inside tools/rxe-vm -n 2 (one copy per host):
#   sh tests/faults/atomic_probe.sh TAG LOSS_PERCENT SECONDS PORT_BASE "SHAPE SHAPE ..."
# SHAPE is W,K[,READS,WRITES,SIZE]: W fetch_adds in flight, result buffers
# reused every K ops (K ending in n: no sentinel), and optionally READS
# RDMA READs and WRITES RDMA WRITEs of SIZE bytes in flight on the same QP.
# Host 1 serves, host 2 runs one client per shape, one after another, each
# on its own port (PORT_BASE + index; the client retries its connect for
# 60 s, which is the only readiness there is). LOSS_PERCENT 0: no netem.
# Output also goes to $LOGS/TAG-hH.log (LOGS defaults to /tmp).
# PROBE is the built probe (build/tests/atomic_probe). Example, from the
# source root after tools/run-tests has built:
#   PROBE=$PWD/build/tests/atomic_probe tools/rxe-vm -n 2 -t 600 -- \
#     sh tests/faults/atomic_probe.sh m1 5 30 7400 "4,4n,8,8,4096 4,4194304 4,4n"
# (the first shape, fetch_adds beside writes under 5% loss, shows rxe
# completing fetch_adds without their old value; the others are clean).
set -u
probe="${PROBE:?set PROBE to the built probe, build/tests/atomic_probe}"
tag=$1 loss=$2 seconds=$3 port=$4 shapes=$5
logs="${LOGS:-/tmp}"
mkdir -p "$logs"
log="$logs/$tag-h$RXE_VM_HOST.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
say "host $RXE_VM_HOST ($RXE_VM_ADDR) kernel $(uname -r) loss ${loss}% shapes: $shapes"
if [ "$loss" != 0 ]; then
  tc qdisc add dev eth0 root netem loss "${loss}%" || { say "tc failed"; exit 3; }
fi
tc qdisc show dev eth0 | tee -a "$log"
server=10.78.0.1
rc=0
# Host 1 starts every shape's server at once, each on its own port, so a
# server that misses its client's disconnect (a lost DREQ) delays no other.
n=0
for shape in $shapes; do n=$((n + 1)); done
pids=""
for shape in $shapes; do
  old_ifs=$IFS
  IFS=,
  set -- $shape
  IFS=$old_ifs
  w=$1 k=$2 r=${3:-} wr=${4:-0} size=${5:-4096}
  if [ "$RXE_VM_HOST" = 1 ]; then
    "$probe" server "$server:$port" --timeout $((n * (seconds + 80) + 60)) --linger $((seconds + 60)) > "$log.$port" 2>&1 &
    pids="$pids $!:$port"
  else
    extra=""
    case "$k" in *n) k=${k%n}; extra=--no-sentinel ;; esac
    [ -n "$r" ] && extra="$extra --reads $r --writes $wr --size $size"
    "$probe" client "$server:$port" --seconds "$seconds" --window "$w" --reuse "$k" $extra --timeout 60 >> "$log" 2>&1
    s=$?
    say "client W=$w K=$k $extra port $port exit $s"
    [ $s = 0 ] || rc=1
  fi
  port=$((port + 1))
done
for p in $pids; do
  wait "${p%%:*}" || { say "server ${p#*:} exit $?"; rc=1; }
  cat "$log.${p#*:}" >> "$log" && rm -f "$log.${p#*:}"
done
grep -h "RESULT\|final word\|returned\|never written\|changed after\|failed\|no completion\|counters" "$log" | sed 's/^/  /'
exit $rc
