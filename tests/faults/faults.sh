#!/usr/bin/env bash
# The faults suite: cordma between real hosts that fail. Each scenario boots
# its own tools/rxe-vm VMs (one per host, their rxe devices joined by a real
# link where tc netem, `ip link set eth0 down` and a power-off are possible)
# and runs tests/support/fault_peer and the modules' own peers there.
#
# Usage: faults.sh SOURCE_ROOT BUILD_DIR SCENARIO
#   loss      2 VMs, 5% of packets lost on each eth0, while every kind of
#             operation and every module runs (tests/faults/mixed_guest.sh):
#             every byte checked, nothing fails (RC retransmission recovers)
#   reorder   the same under 1% loss, 20 ms delay and reordering
#   starve    the same with no netem, on loaded hosts (a busy loop on each),
#             every server process on host 1 stopped for 4 s mid-traffic:
#             a slow live peer, which no client may take for a dead one
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
#   soak      1 VM: 64 connections x 256 operations in flight for 20 s,
#             every read checked, memory and fds flat from second 5 on
#   resources 1 VM: tests/resources_test.cpp, every connection style and
#             module gives back every RDMA resource and fd
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
mixed() {  # NETEM...
  vm -n 2 -t 420 -- env SRC="$src" BUILD="$build" NETEM="$*" STARVE="${STARVE:-}" SECONDS_OF_TRAFFIC=20 \
    STREAM_BYTES=$((16 << 20)) RPC_CALLS=2000 sh "$src/tests/faults/mixed_guest.sh"
}
case "$scenario" in
  # netem's queue holds 64 packets, not its default 1,000: on this
  # emulated link (about 10 MB/s) 1,000 packets of 4 KiB are 0.4 s of
  # queueing, more than RC's 7 ACK timeouts of 67 ms, so a retried READ
  # waited behind the retransmissions of every other QP and its QP gave up
  # (retry counter exceeded; 1 in 5 runs). A real switch port buffers
  # microseconds, not seconds; 64 packets are about 25 ms here.
  loss)    mixed limit 64 loss 5% ;;
  reorder) mixed loss 1% delay 20ms reorder 5% 50% ;;
  # A slow live peer is not a dead one: every server stopped for 4 s on a
  # loaded host, every client carries on (the dead one: poweroff below).
  starve)  STARVE=4 mixed ;;
  linkdown)
    echo "faults.sh: retry time of the default settings: (6 + 1) x 4.096 us x 2^14 = $retry_ms ms; limit $linkdown_limit ms"
    vm -n 2 -t 420 -- env BUILD="$build" SCENARIO=linkdown LIMIT_MS=$linkdown_limit sh "$src/tests/faults/pressure_guest.sh" ;;
  poweroff)
    vm -n 3 -t 420 -- env BUILD="$build" SCENARIO=poweroff LIMIT_MS=5000 sh "$src/tests/faults/pressure_guest.sh" ;;
  soak)
    vm -t 300 -- "$fp" soak 10.77.0.1:0 --connections 64 --depth 256 --seconds 20 ;;
  resources)
    vm -t 300 -- env CORDMA_TEST_PEER="$build/tests/peer" "$build/tests/resources_test" --durations yes ;;
  *) echo "faults.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
