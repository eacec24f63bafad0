# bench/lib/module-run.sh: what the module benchmarks' run scripts share
# (bench/rpc/run, bench/stream/run, bench/collectives/run), sourced after
# tools/lib/common.sh: --help, checks of numeric options, the device the
# inside half measures on, the built benchmark programs, the host's load
# while measuring, and running the inside half next to a device.
# shellcheck shell=bash

# --help: the comment block at the top of the running script, without '#'.
bench_help() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
}

# Each variable named holds a positive number, or the run stops, naming its
# option (the variable's name with '-' for '_').
bench_positive() {  # variable...
  local v
  for v in "$@"; do
    case "${!v}" in ''|*[!0-9]*|0) cordma_die "--${v//_/-} wants a positive number, got '${!v}'" ;; esac
  done
}

# Inside: the RDMA device to measure on ($dev), its IPv4 address ($addr,
# possibly empty) and its hardware counters' folder ($counters), for the
# script that sourced this.
# shellcheck disable=SC2034
bench_device() {
  dev=${CORDMA_TEST_DEVICE:-${RXE_VM_DEVICE:?no RDMA device: CORDMA_TEST_DEVICE and RXE_VM_DEVICE are unset}}
  addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
  counters=/sys/class/infiniband/$dev/ports/1/hw_counters
}

# The built file of an executable() target of $CORDMA_BUILD, by name
# (nothing if there is none).
bench_target_file() {  # name
  meson introspect "$CORDMA_BUILD" --targets | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["name"] == sys.argv[1] and t["type"] == "executable":
        print(t["filename"][0]); break' "$1"
}

# Other work on the host's cores (another VM, a compiler) slows the VM's
# vCPUs and scatters every figure: bench/stream/host_load.py waits for
# quiet if asked (up to QUIET_WAIT s), and samples the others' CPU use
# while measuring into WORK/host-load.log, until $sampler is killed (at
# exit at the latest).
bench_sample_host_load() {  # work quiet_wait
  if [ "$2" -gt 0 ]; then
    cordma_say "waiting (up to $2 s) until nothing else keeps this host's cores busy"
    python3 "$CORDMA_ROOT/bench/stream/host_load.py" wait $$ "$2" ||
      cordma_say "still busy after $2 s: measuring anyway (the report says how busy)"
  fi
  python3 "$CORDMA_ROOT/bench/stream/host_load.py" sample $$ "$1/host-load.log" &
  sampler=$!
  trap 'kill "$sampler" 2>/dev/null || true' EXIT
}

# Runs the inside half (the command given) on the host's RDMA device if it
# has an active one, else inside one tools/rxe-vm boot of at most VM_TIMEOUT
# s, from $CORDMA_ROOT; stops the run unless it succeeded and wrote
# WORK/meta.json.
bench_measure() {  # vm_timeout work command...
  local vm_timeout=$1 work=$2 rc=0
  shift 2
  cd "$CORDMA_ROOT" || cordma_die "cannot enter $CORDMA_ROOT"
  if cordma_find_device; then
    cordma_say "using the host's RDMA device $CORDMA_DEVICE"
    CORDMA_TEST_DEVICE=$CORDMA_DEVICE CORDMA_TEST_ADDR=$CORDMA_ADDR "$@" || rc=$?
  else
    [ "$(id -u)" -eq 0 ] || cordma_die "no RDMA device here, and tools/rxe-vm must run as root: use sudo."
    cordma_say "no RDMA device on this host: one tools/rxe-vm boot (at most $vm_timeout s)"
    "$CORDMA_ROOT/tools/rxe-vm" -t "$vm_timeout" "$@" || rc=$?
  fi
  [ "$rc" -eq 0 ] && [ -s "$work/meta.json" ] ||
    cordma_die "the measurements failed (status $rc; output above, logs in $work). Nothing written to bench/results/."
}
