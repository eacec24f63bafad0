# shellcheck shell=bash
# tools/lib/common.sh: set-up shared by tools/run-tests and tools/run-demo.
#
# Sourced, not run.  The sourcing script sets CORDMA_TOOL (its name, for
# messages) first.  Provides:
#   CORDMA_ROOT, CORDMA_BUILD      the repo and its build directory
#                                  (CORDMA_BUILD_DIR overrides build/)
#   cordma_install_deps [--tests]  tools/install-deps [--tests]
#   cordma_build [TARGET...]       meson setup (once) + meson compile (of
#                                  the TARGETs only, when given: run-demo
#                                  builds the library and its two programs);
#                                  CORDMA_WERROR=1 (the default, for both
#                                  tools, so the demo's build is the tests'
#                                  build and nothing is compiled twice) adds
#                                  -Dwerror=true, so any compiler warning
#                                  fails the build (an existing build
#                                  directory whose werror differs is
#                                  switched with meson configure)
#   cordma_find_device             a host RDMA device with an ACTIVE port
#   cordma_run_rdma [--no-tty] CMD...
#                                  CMD on that device, else inside tools/rxe-vm
# Why: both scripts must build the same way and pick the device the same
# way, natively on real RDMA hardware and through the VM everywhere else.

CORDMA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CORDMA_BUILD=${CORDMA_BUILD_DIR:-$CORDMA_ROOT/build}
case "$CORDMA_BUILD" in /*) ;; *) CORDMA_BUILD=$PWD/$CORDMA_BUILD ;; esac
# Written by tools/lib/with-device: which device the last run used.
CORDMA_DEVICE_RECORD=$CORDMA_BUILD/meson-logs/cordma-device.txt
: "${CORDMA_TOOL:=cordma}"

cordma_say() { printf '%s: %s\n' "$CORDMA_TOOL" "$*"; }
cordma_die() {
  local line
  for line in "$@"; do printf '%s: error: %s\n' "$CORDMA_TOOL" "$line" >&2; done
  exit 1
}

cordma_install_deps() {  # [--tests]
  "$CORDMA_ROOT/tools/install-deps" "$@" ||
    cordma_die "installing the build dependencies failed (see above)." \
               "Fix that, or run tools/install-deps by hand, then run $CORDMA_TOOL again."
}

# Configures the build directory if it is not one yet, then compiles (every
# target, or the TARGETs given) with as many jobs as there are cores
# (CORDMA_JOBS overrides).  Warnings are errors (-Dwerror=true) unless
# CORDMA_WERROR=0: CI and developers build alike, so a change adding a
# warning fails at once, and tools/run-demo and tools/run-tests share one
# configuration (switching werror would recompile everything).
cordma_build() {
  command -v meson >/dev/null 2>&1 || cordma_die "meson is not installed: run tools/install-deps."
  local werror
  case "${CORDMA_WERROR:-1}" in
    1) werror=true ;;
    0) werror=false ;;
    *) cordma_die "CORDMA_WERROR must be 1 (warnings are errors, the default) or 0, not '$CORDMA_WERROR'." ;;
  esac
  if [ ! -f "$CORDMA_BUILD/meson-private/coredata.dat" ]; then
    # -g1 (line tables: backtraces and sanitizer reports keep file and
    # line) instead of the build type's -g: the same code, compiled about
    # a quarter faster (the library's slowest source 17.6 to 12.8 s), which
    # is about 2 of CI's build minutes. A build for debugging sets its own
    # cpp_args.
    cordma_say "configuring $CORDMA_BUILD (-Dwerror=$werror, -g1)"
    meson setup -Dwerror="$werror" -Dcpp_args=-g1 -Dc_args=-g1 "$CORDMA_BUILD" "$CORDMA_ROOT" ||
      cordma_die "meson setup failed (see above). If $CORDMA_BUILD is not a meson build" \
                 "directory, remove it (rm -rf $CORDMA_BUILD) and try again."
  else
    local current
    current=$(meson introspect "$CORDMA_BUILD" --buildoptions 2>/dev/null | python3 -c '
import json, sys
print(next((str(o["value"]).lower() for o in json.load(sys.stdin) if o["name"] == "werror"), ""))' || true)
    if [ "$current" != "$werror" ]; then
      cordma_say "reconfiguring $CORDMA_BUILD (-Dwerror=$werror, was ${current:-unknown})"
      meson configure "$CORDMA_BUILD" -Dwerror="$werror" ||
        cordma_die "meson configure $CORDMA_BUILD -Dwerror=$werror failed (see above)."
    fi
  fi
  local jobs=${CORDMA_JOBS:-$(nproc 2>/dev/null || echo 2)}
  cordma_say "compiling ${*:-everything} with $jobs jobs"
  meson compile -C "$CORDMA_BUILD" -j "$jobs" "$@" ||
    cordma_die "the build failed (compiler errors above${setup_args[*]:+; with -Dwerror=true every warning is one})."
}

# Sets CORDMA_DEVICE (and CORDMA_ADDR, an IPv4 address of its netdev, maybe
# empty) to the first host RDMA device with an ACTIVE port, honouring a
# CORDMA_TEST_DEVICE/CORDMA_TEST_ADDR given by the caller.  Returns 1 if the
# host has no such device.
cordma_find_device() {
  CORDMA_DEVICE=""; CORDMA_ADDR=""
  local state dev port ndev="" found=""
  for state in /sys/class/infiniband/*/ports/*/state; do
    [ -r "$state" ] || continue
    grep -q ACTIVE "$state" 2>/dev/null || continue
    port=${state%/state}; port=${port##*/}
    dev=${state#/sys/class/infiniband/}; dev=${dev%%/*}
    if [ -n "${CORDMA_TEST_DEVICE:-}" ] && [ "$dev" != "$CORDMA_TEST_DEVICE" ]; then continue; fi
    found=1; break
  done
  [ -n "$found" ] || return 1
  CORDMA_DEVICE=$dev
  if [ -n "${CORDMA_TEST_ADDR:-}" ]; then
    CORDMA_ADDR=$CORDMA_TEST_ADDR; return 0
  fi
  # The netdev behind the port (RoCE/iWARP; InfiniBand ports have none).
  if command -v rdma >/dev/null 2>&1; then
    ndev=$(rdma link show "$dev/$port" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p' | head -n 1 || true)
  fi
  if [ -z "$ndev" ]; then
    ndev=$(cat /sys/class/infiniband/"$dev"/ports/"$port"/gid_attrs/ndevs/* 2>/dev/null | head -n 1 || true)
  fi
  if [ -n "$ndev" ] && command -v ip >/dev/null 2>&1; then
    CORDMA_ADDR=$(ip -4 -o addr show dev "$ndev" 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }' || true)
  fi
  return 0
}

# Runs CMD (from the repo root) with CORDMA_TEST_DEVICE/CORDMA_TEST_ADDR set:
# natively when the host has an active RDMA device, else on rxe0 inside
# tools/rxe-vm.  Returns CMD's status.  --no-tty: see tools/lib/with-device.
cordma_run_rdma() {
  local rc=0 opts=()
  if [ "${1:-}" = --no-tty ]; then opts=(--no-tty); shift; fi
  cd "$CORDMA_ROOT" || cordma_die "cannot cd to $CORDMA_ROOT"
  mkdir -p "$(dirname "$CORDMA_DEVICE_RECORD")"
  rm -f "$CORDMA_DEVICE_RECORD"
  if cordma_find_device; then
    cordma_say "using the host's RDMA device $CORDMA_DEVICE${CORDMA_ADDR:+ ($CORDMA_ADDR)}"
    [ -n "$CORDMA_ADDR" ] || cordma_say "warning: no IPv4 address found on $CORDMA_DEVICE's netdev; tests that connect over rdma_cm will fail"
    CORDMA_TEST_DEVICE=$CORDMA_DEVICE CORDMA_TEST_ADDR=$CORDMA_ADDR \
      "$CORDMA_ROOT/tools/lib/with-device" "${opts[@]}" "$CORDMA_DEVICE_RECORD" "$@" || rc=$?
    return $rc
  fi
  [ -z "${CORDMA_TEST_DEVICE:-}" ] ||
    cordma_die "CORDMA_TEST_DEVICE=$CORDMA_TEST_DEVICE, but this host has no such RDMA device with an" \
               "ACTIVE port (see 'rdma link'). Unset it to use the first active device, or tools/rxe-vm."
  command -v qemu-system-x86_64 >/dev/null 2>&1 ||
    cordma_die "this host has no RDMA device with an ACTIVE port, and QEMU (qemu-system-x86_64)" \
               "is missing, so tools/rxe-vm cannot provide one. Run tools/install-deps," \
               "or run on a machine with RDMA (e.g. 'rdma link add rxe0 type rxe netdev eth0')."
  [ "$(id -u)" -eq 0 ] ||
    cordma_die "this host has no RDMA device, and tools/rxe-vm (Soft-RoCE in a VM) must run as root." \
               "Run again with sudo."
  cordma_say "no RDMA device on this host: running on Soft-RoCE (rxe0, and rxe1 for the rails tests) inside tools/rxe-vm"
  # Two rails: rails_test and several_devices_test want a second device.
  "$CORDMA_ROOT/tools/rxe-vm" --rails 2 "$CORDMA_ROOT/tools/lib/with-device" "${opts[@]}" "$CORDMA_DEVICE_RECORD" "$@" || rc=$?
  case $rc in
    124) cordma_say "tools/rxe-vm: the command timed out" >&2 ;;
    125) cordma_say "tools/rxe-vm: the VM failed before the command finished (see its console output above)" >&2 ;;
  esac
  return $rc
}

# Prints which device the last cordma_run_rdma used.
cordma_device_used() {
  if [ -s "$CORDMA_DEVICE_RECORD" ]; then
    cat "$CORDMA_DEVICE_RECORD"
  else
    echo "unknown (the command never started on a device)"
  fi
}
