#!/usr/bin/env bash
# The faults suite: cordma between real hosts that fail. Each scenario boots
# its own tools/rxe-vm VMs (one per host, their rxe devices joined by a real
# link where tc netem, `ip link set eth0 down` and a power-off are possible)
# and runs tests/support/fault_peer and the modules' own peers there.
#
# Usage: faults.sh SOURCE_ROOT BUILD_DIR SCENARIO
#   mixed     2 VMs, every kind of operation and every module at once
#             (tests/faults/mixed_guest.sh; the stream 16 MiB each way, in
#             random sizes), every byte checked, nothing may fail, in three
#             phases in one boot:
#     loss      5% of packets lost on each eth0 (RC retransmission recovers)
#     reorder   1% loss, 20 ms delay and reordering
#     starve    no netem, on loaded hosts (a busy loop on each), every
#               server process on host 1 stopped for 4 s mid-traffic: a slow
#               live peer, which no client may take for a dead one
#   loss, reorder, starve   one phase alone (by hand)
#   linkdown  2 VMs; host 1's link goes down under 1,000 operations in
#             flight from host 2, just as host 1 replies to one (so its own
#             connection ends while its link is down): all of host 2's fail
#             within the retry time the QP's settings imply, saying the peer
#             stopped acknowledging; after the link is back host 2 connects
#             again and its resources are what they were with the old
#             connection
#   poweroff  3 VMs; host 2 powers off under 1,000 operations in flight
#             from host 1, which fails them all within 5 s, frees them, and
#             goes on serving host 3's traffic throughout
#   rails     2 VMs with two links each, one connection over both
#             (builder::rails): 128 MiB written and read back striped with
#             5% loss on rail 1 (which may run out of retries and go down:
#             rails_guest.sh says why), then again with rail 1's link taken
#             down at 30%: every byte right, no operation failed, none
#             stalled longer than the retry time's limit when the link went
#             down, rail 1 reported down, then back on new queue pairs once
#             the link is; then an rpc server and 8 clients over both rails
#             for 60 s while rail 1's link flaps twice: every call answered
#             exactly once, every client's rail 1 back at the end
#   soak      64 connections x 256 operations in flight for 20 s, every
#             read checked, memory and fds flat from second 5 on
# soak needs one host, not a link between hosts: it runs in the rxe suite,
# on its device (CORDMA_TEST_ADDR, inside the rxe suite's own VM where
# there is no device), not in a boot of its own; so does faults_resources
# (tests/resources_test.cpp, registered as the Catch2 test it is).
# Each VM's exit status is its host's; rxe-vm returns the first non-zero.
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) scenario=$3
cd "$build"
vm() { "$src/tools/rxe-vm" "$@"; }
fp="$build/tests/fault_peer"
# The retry time of cordma's default QP settings (qp_defaults in
# queue_pair.hpp, explained in builder.hpp): timeout code 14
# (4.096 us * 2^14 = 67 ms), retry_count 6: 7 tries, 470 ms. The
# limit allows the IB spec's 4x timer slack plus 1 s for the emulated CPU.
retry_ms=$(( (6 + 1) * 4096 * (1 << 14) / 1000000 ))
linkdown_limit=$(( 4 * retry_ms + 1000 ))
# A host whose emulated NIC stalls is booted again by rxe-vm itself.
mixed() {  # PHASES (tests/faults/mixed_guest.sh says what each does)
  vm -n 2 -t $((60 + 180 * $#)) -- env SRC="$src" BUILD="$build" PHASES="$*" SECONDS_OF_TRAFFIC=20 \
    STREAM_BYTES=$((16 << 20)) RPC_CALLS=2000 sh "$src/tests/faults/mixed_guest.sh"
}
case "$scenario" in
  # The three phases in one boot (two boots less, about 40 s of CI); each
  # alone by hand. The stream's 16 MiB each way under loss (over 4,000
  # packets, some 200 of them lost) is also the stream under loss CI runs
  # (stream_hosts.sh loss2, the stream alone, by hand).
  mixed) mixed loss reorder starve ;;
  loss|reorder|starve) mixed "$scenario" ;;
  linkdown)
    echo "faults.sh: retry time of the default settings: (6 + 1) x 4.096 us x 2^14 = $retry_ms ms; limit $linkdown_limit ms"
    vm -n 2 -t 420 -- env BUILD="$build" SCENARIO=linkdown LIMIT_MS=$linkdown_limit sh "$src/tests/faults/pressure_guest.sh" ;;
  poweroff)
    vm -n 3 -t 420 -- env BUILD="$build" SCENARIO=poweroff LIMIT_MS=5000 sh "$src/tests/faults/pressure_guest.sh" ;;
  rails)
    echo "faults.sh: an operation may stall at most $linkdown_limit ms when a rail fails"
    vm -n 2 --rails 2 -t 480 -- env BUILD="$build" LIMIT_MS=$linkdown_limit sh "$src/tests/faults/rails_guest.sh" ;;
  soak)
    [ -n "${CORDMA_TEST_ADDR:-}" ] ||
      { echo "faults.sh: soak runs on the rxe suite's device: CORDMA_TEST_ADDR is not set (run it through tools/run-tests)" >&2; exit 2; }
    "$fp" soak "$CORDMA_TEST_ADDR:0" --connections 64 --depth 256 --seconds 20 ;;
  *) echo "faults.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
