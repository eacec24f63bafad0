#!/usr/bin/env bash
# group across real hosts: boots tools/rxe-vm -n N (one VM per rank, their
# rxe devices joined by a real link) and runs one scenario on them.
#
# Usage: group_hosts.sh SOURCE_ROOT BUILD_DIR SCENARIO
#   mesh3         examples/mesh on 3 VMs, 20 rounds: every rank streams
#                 messages (inline and read-by-the-receiver sizes) to
#                 every other and serves all that arrive at once, every
#                 byte and the order checked, an all_reduce between rounds
#   collectives4  examples/collectives on 4 VMs, every collective checked
#   missing3      rank 2's VM runs nothing: ranks 0 and 1 fail to form
#                 within their 15 s deadline, naming rank 2 alone
#   death3        rank 2 kills itself after the first barrier; ranks 0
#                 and 1, waiting in a broadcast from it, fail within 5 s
#                 naming it
#   poweroff3     as death3, but rank 2's whole VM powers off: no
#                 disconnect is sent, the keepalives a waiting collective
#                 sends each second find the host gone
# Each VM's exit status is its rank's; rxe-vm returns the first non-zero.
set -euo pipefail
src=$1 build=$2 scenario=$3
cd "$build"
vm() { "$src/tools/rxe-vm" "$@"; }
hosts() {  # the host list of n ranks, rank r on 10.78.0.(r+1)
  local n=$1 list="" r
  for ((r = 1; r <= n; r++)); do list+="${list:+,}10.78.0.$r:7600"; done
  echo "$list"
}
peer="$build/tests/group_peer"
case "$scenario" in
  mesh3)
    vm -n 3 -t 240 -- sh -c "examples/mesh --rank \$((RXE_VM_HOST-1)) --hosts $(hosts 3) --rounds 20 --quiet --device rxe0" ;;
  collectives4)
    vm -n 4 -t 300 -- sh -c "examples/collectives --rank \$((RXE_VM_HOST-1)) --hosts $(hosts 4) --quiet --device rxe0" ;;
  missing3)
    vm -n 3 -t 240 -- sh -c "if [ \$RXE_VM_HOST = 3 ]; then echo 'rank 2 never starts'; else $peer $(hosts 3) \$((RXE_VM_HOST-1)) expect-missing 2; fi" ;;
  death3)
    vm -n 3 -t 240 -- sh -c "if [ \$RXE_VM_HOST = 3 ]; then $peer $(hosts 3) 2 die; [ \$? = 137 ]; else $peer $(hosts 3) \$((RXE_VM_HOST-1)) expect-death 2; fi" ;;
  poweroff3)
    vm -n 3 -t 240 -- sh -c "if [ \$RXE_VM_HOST = 3 ]; then $peer $(hosts 3) 2 poweroff; else $peer $(hosts 3) \$((RXE_VM_HOST-1)) expect-death 2; fi" ;;
  *)
    echo "group_hosts.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
