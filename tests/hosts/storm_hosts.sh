#!/usr/bin/env bash
# Connection storms across real hosts (issue 32): boots tools/rxe-vm -n 5;
# host 1 serves, hosts 2 to 5 connect all their clients at once
# (bench/storm/cordma_storm, coroutines of one process per host), and
# `--check-qps` fails a side that has a queue pair out of RTS once
# connected or any left in the error state once every client has closed.
#
# Usage: storm_hosts.sh SOURCE_ROOT BUILD_DIR SCENARIO
#   rpc5        1,000 rpc clients (250 per host) over rdma_cm, 10 calls
#               each, every echo checked, and no receiver-not-ready NAK
#               counted by any host's device (--no-rnr)
#   agent_tcp5  256 connections with the agent (64 per host) over the TCP
#               endpoint exchange
#   busy2       two VMs: 16 connections with the agent at once, 12 times in
#               a row, while a stream carries 160 MiB each way on the same
#               link (tests/support/stream_peer, every byte checked): the
#               race between a connection's two QPs under load (issue 32)
# The clients start with the server: until it listens their connects are
# refused and retried (builder::connect_timeout bounds it).
# rpc5 and agent_tcp5 were once run one after the other in one boot (a
# 5-VM boot costs about 30 s of CI): in the first whole CI run that way
# (2026-11-29) host 5 printed nothing and the test hit its 600 s limit
# although host 1 served both storms whole. Not understood yet, so each
# has its own boot again.
set -euo pipefail
src=$1 build=$2 scenario=$3
cd "$build"
storm="$build/bench/cordma_storm"
run() {  # PER_HOST OPTIONS...
  local per=$1; shift
  # One line: rxe-vm hands the command to the guest's sh quoted with %q.
  local cmd="if [ \$RXE_VM_HOST = 1 ];"
  cmd+=" then $storm serve 10.78.0.1:7630 --connections $((4 * per)) --timeout 300 --check-qps $*;"
  cmd+=" else $storm connect 10.78.0.1:7630 --connections $per --timeout 300 --check-qps $*; fi"
  "$src/tools/rxe-vm" -n 5 -t 400 -- sh -c "$cmd"
}
busy() {
  local cmd="if [ \$RXE_VM_HOST = 1 ];"
  cmd+=" then $build/tests/stream_peer serve 10.78.0.1:7610 $((160 << 20)) & load=\$!;"
  cmd+=" $storm serve 10.78.0.1:7630 --connections 192 --kind agent --timeout 300 --check-qps || exit 1;"
  cmd+=" else $build/tests/stream_peer connect 10.78.0.1:7610 $((160 << 20)) & load=\$!;"
  cmd+=" t0=\$(date +%s); for round in \$(seq 12); do"
  cmd+=" $storm connect 10.78.0.1:7630 --connections 16 --kind agent --timeout 120 --check-qps > /dev/null"
  cmd+=" || { echo \"round \$round of 12 failed\"; exit 1; }; done; echo \"12 rounds of 16 connected in \$((\$(date +%s) - t0)) s, the stream running\";"
  cmd+=" fi; wait \$load"
  "$src/tools/rxe-vm" -n 2 -t 400 -- sh -c "$cmd"
}
case "$scenario" in
  # Five emulated VMs share two cores here, and rxe is the guest kernel's:
  # a VM off the CPU for half a second does not acknowledge, and RC's
  # default retry time (7 x 67 ms) then takes a live server for a dead one
  # (seen: 2 of 1,000 clients). A real NIC acknowledges whatever its host's
  # CPUs do; here each try waits 1 s (code 18), 7.5 s in all.
  rpc5)       run 250 --kind rpc --calls 10 --ack-timeout 18 --no-rnr ;;
  agent_tcp5) run 64 --kind agent --exchange tcp --ack-timeout 18 ;;
  busy2)      busy ;;
  *) echo "storm_hosts.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
