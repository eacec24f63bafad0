#!/usr/bin/env bash
# cordma::stream across two real hosts: boots tools/rxe-vm -n 2 (one VM
# each, their rxe devices joined by a real link) and runs
# tests/support/stream_peer on them: host 1 serves, host 2 connects, and
# both write BYTES of a checked pattern while reading the other's, in
# random sizes (copied frames and zero-copy reads both run).
#
# Usage: stream_hosts.sh SOURCE_ROOT BUILD_DIR SCENARIO   (by hand; CI runs
# the same stream in faults_mixed and storm_busy2, tests/meson.build says why)
#   clean2   the link as it is, 128 MiB each way
#   loss2    5% of the packets lost on each host's eth0 (`tc qdisc add dev
#            eth0 root netem loss 5%`), 32 MiB each way (over 8,000 packets,
#            some 400 of them lost): RC retransmission
#            recovers every one, so no call may fail and every byte must match
# Each VM's exit status is its side's; rxe-vm returns the first non-zero.
set -euo pipefail
src=$1 build=$2 scenario=$3
cd "$build"
peer="$build/tests/stream_peer"
run() {  # BYTES [NETEM...]
  local bytes=$1; shift
  local fault=""
  [ $# -eq 0 ] || fault="tc qdisc add dev eth0 root netem $* && tc qdisc show dev eth0 &&"
  "$src/tools/rxe-vm" -n 2 -t 420 -- sh -c "$fault if [ \$RXE_VM_HOST = 1 ]; then $peer serve 10.78.0.1:7610 $bytes; else $peer connect 10.78.0.1:7610 $bytes; fi"
}
case "$scenario" in
  clean2) run $((128 << 20)) ;;
  loss2)  run $((32 << 20)) loss 5% ;;
  *) echo "stream_hosts.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
