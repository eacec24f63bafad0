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
#   mesh_failures3  mesh3's run, then three failures, one after another
#                 on the same 3 VMs (one boot, not four; each on its own
#                 port; a 3-VM boot is about 20 s of CI):
#                 death: rank 2 kills itself after the first barrier;
#                   ranks 0 and 1, waiting in a broadcast from it, fail
#                   within 5 s naming it;
#                 missing: rank 2 runs nothing on the next port: ranks 0
#                   and 1 fail to form within their 15 s deadline, naming
#                   rank 2 alone;
#                 poweroff: as death, but rank 2's whole VM powers off: no
#                   disconnect is sent, the keepalives a waiting collective
#                   sends each second find the host gone
# Each VM's exit status is its rank's; rxe-vm returns the first non-zero.
set -euo pipefail
src=$1 build=$2 scenario=$3
cd "$build"
vm() { "$src/tools/rxe-vm" "$@"; }
hosts() {  # N [PORT]: the host list of N ranks, rank r on 10.78.0.(r+1)
  local n=$1 port=${2:-7600} list="" r
  for ((r = 1; r <= n; r++)); do list+="${list:+,}10.78.0.$r:$port"; done
  echo "$list"
}
peer="$build/tests/group_peer"
case "$scenario" in
  mesh3)
    vm -n 3 -t 240 -- sh -c "examples/mesh --rank \$((RXE_VM_HOST-1)) --hosts $(hosts 3) --rounds 20 --quiet --device rxe0" ;;
  collectives4)
    vm -n 4 -t 300 -- sh -c "examples/collectives --rank \$((RXE_VM_HOST-1)) --hosts $(hosts 4) --quiet --device rxe0" ;;
  mesh_failures3)
    mesh="examples/mesh --rank \$((RXE_VM_HOST-1)) --hosts $(hosts 3) --rounds 20 --quiet --device rxe0"
    # Rank 2 moves on to the power-off's port while ranks 0 and 1 wait
    # out the missing rank on theirs; forming waits up to 60 s for them.
    # One line: rxe-vm hands the command to the guest's sh quoted with %q.
    last="echo 'death:'; $peer $(hosts 3 7601) 2 die || st=\$?; [ \$st = 137 ] || { echo \"rank 2: die exited \$st, not 137\"; exit 1; };"
    last+=" echo 'missing: rank 2 never starts'; echo 'poweroff:'; $peer $(hosts 3 7603) 2 poweroff"
    others="r=\$((RXE_VM_HOST-1)); echo 'death:' && $peer $(hosts 3 7601) \$r expect-death 2"
    others+=" && echo 'missing:' && $peer $(hosts 3 7602) \$r expect-missing 2"
    others+=" && echo 'poweroff:' && $peer $(hosts 3 7603) \$r expect-death 2"
    vm -n 3 -t 420 -- sh -c "st=0; echo 'mesh:'; $mesh || exit 1; if [ \$RXE_VM_HOST = 3 ]; then $last; else $others; fi" ;;
  *)
    echo "group_hosts.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
