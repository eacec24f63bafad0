#!/usr/bin/env bash
# doctor_test.sh: tools/doctor says what is missing, and exits accordingly.
#
# Why: doctor is what a new user runs when cordma cannot start; a check that
# reads the wrong file, or an exit status that says "fine" on a host without
# RDMA, would send them the wrong way.  Every case checks the exit status
# and the exact lines that name the problem and its fix.
#
# Usage: tests/doctor_test.sh SOURCE-DIR host   (unit suite, no device)
#   1. a host with no RDMA at all (an empty sysfs and /dev, through
#      DOCTOR_SYSFS/DOCTOR_DEV, so the case is the same on any machine):
#      exit 1; the rdma_rxe module, the missing device and uverbs are named,
#      each with its fix (modprobe and `rdma link add`, or tools/rxe-vm);
#   2. a made-up sysfs with rxe0 ACTIVE on eth0 and a GID table of RoCE v1,
#      v2 IPv6 and v2 IPv4 entries: exit 0, the port ACTIVE, each GID with
#      its type, and index 3 named for builder::gid_index;
#   3. the same port DOWN: exit 1 (no ACTIVE port), with `ip link set eth0 up`;
#   4. `ulimit -l 64`: a WARN with the numbers (64 KiB, 65536 bytes, the 8 MiB
#      recommended, the 4 MiB chunk) and the fixes for a user, a systemd
#      service and a container;
#   5. this real host, when it has no /sys/class/infiniband (as in CI):
#      exit 1, naming the device as missing.
# Usage: tests/doctor_test.sh SOURCE-DIR device  (rxe suite, inside tools/rxe-vm)
#   the real rxe0: exit 0, rxe0 port 1 ACTIVE and a RoCE v2 GID index for
#   its IPv4 address, no MISSING line.
set -uo pipefail

src=${1:?usage: doctor_test.sh SOURCE-DIR host|device}
mode=${2:?usage: doctor_test.sh SOURCE-DIR host|device}
doctor=$src/tools/doctor
failures=0

fail() { echo "doctor_test: FAIL: $*" >&2; failures=$((failures + 1)); }
# expect_line NAME OUTPUT REGEX: OUTPUT must have a line matching REGEX.
expect_line() {
  grep -Eq -- "$3" <<<"$2" || fail "$1: no line matching /$3/ in:"$'\n'"$2"
}
no_line() {
  ! grep -Eq -- "$3" <<<"$2" || fail "$1: a line matches /$3/ in:"$'\n'"$2"
}
# run NAME EXPECTED-STATUS [ENV...]: runs doctor, sets $out.
run() {
  local name=$1 want=$2; shift 2
  out=$(env "$@" "$doctor" 2>&1); local rc=$?
  [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want; output:"$'\n'"$out"
  echo "doctor_test: $name: exit status $rc"
}

if [ "$mode" = device ]; then
  run "the real rxe0" 0
  expect_line "rxe0" "$out" '^ok +RDMA devices \(/sys/class/infiniband\): .*rxe0'
  expect_line "rxe0" "$out" '^ok +rxe0 port 1 \(Ethernet, netdev [a-z0-9]+\): ACTIVE$'
  expect_line "rxe0" "$out" '^ok +rxe0 port 1 .*: RoCE v2 GID index [0-9]+ for IPv4 [0-9.]+ .*builder::gid_index\([0-9]+\)'
  expect_line "rxe0" "$out" '^ok +kernel module rdma_rxe: loaded$'
  expect_line "rxe0" "$out" '^ok +/dev/infiniband/uverbs\*: uverbs[0-9]'
  no_line "rxe0" "$out" '^MISSING'
  expect_line "rxe0" "$out" '^doctor: cordma can run here'
  [ "$failures" -eq 0 ] || { echo "doctor_test: $failures failure(s)"; exit 1; }
  echo "doctor_test: ok"
  exit 0
fi

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# 1. Nothing at all.
mkdir -p "$work/empty/sys" "$work/empty/dev"
run "no RDMA" 1 DOCTOR_SYSFS="$work/empty/sys" DOCTOR_DEV="$work/empty/dev"
expect_line "no RDMA" "$out" '^MISSING +kernel module rdma_rxe: '
expect_line "no RDMA" "$out" 'fix: (sudo modprobe rdma_rxe|install the kernel.s extra modules)'
expect_line "no RDMA" "$out" '^MISSING +RDMA devices \(.*/class/infiniband\): none$'
expect_line "no RDMA" "$out" 'fix: sudo modprobe rdma_rxe && sudo rdma link add rxe0 type rxe netdev [^ ]+ '
expect_line "no RDMA" "$out" 'fix: or, if the kernel lacks rdma_rxe: run cordma inside tools/rxe-vm'
expect_line "no RDMA" "$out" '^MISSING +.*/infiniband/uverbs\*: none'
expect_line "no RDMA" "$out" '^doctor: cordma cannot run here: [0-9]+ missing'

# 2. A made-up rxe0 on eth0, ACTIVE, with a GID table as rxe fills it.
fake=$work/fake
port=$fake/sys/class/infiniband/rxe0/ports/1
mkdir -p "$port/gids" "$port/gid_attrs/types" "$port/gid_attrs/ndevs" "$fake/dev/infiniband"
for m in ib_core ib_uverbs rdma_ucm rdma_rxe; do mkdir -p "$fake/sys/module/$m"; done
echo "4: ACTIVE" > "$port/state"
echo Ethernet > "$port/link_layer"
gid() { echo "$2" > "$port/gids/$1"; echo "$3" > "$port/gid_attrs/types/$1"; echo eth0 > "$port/gid_attrs/ndevs/$1"; }
gid 0 fe80:0000:0000:0000:5054:00ff:fe12:3456 "IB/RoCE v1"
gid 1 fe80:0000:0000:0000:5054:00ff:fe12:3456 "RoCE v2"
gid 2 0000:0000:0000:0000:0000:ffff:0a00:0001 "IB/RoCE v1"
gid 3 0000:0000:0000:0000:0000:ffff:0a00:0001 "RoCE v2"
echo 0000:0000:0000:0000:0000:0000:0000:0000 > "$port/gids/4"  # an empty slot: no type
: > "$fake/dev/infiniband/uverbs0"; : > "$fake/dev/infiniband/rdma_cm"
run "rxe0 ACTIVE" 0 DOCTOR_SYSFS="$fake/sys" DOCTOR_DEV="$fake/dev"
expect_line "rxe0 ACTIVE" "$out" '^ok +RDMA devices \(.*\): rxe0$'
expect_line "rxe0 ACTIVE" "$out" '^ok +rxe0 port 1 \(Ethernet, netdev eth0\): ACTIVE$'
expect_line "rxe0 ACTIVE" "$out" '^info +rxe0 port 1 .*: GID index 0: fe80:.*, IB/RoCE v1 \(cordma uses RoCE v2 only\)$'
expect_line "rxe0 ACTIVE" "$out" '^info +rxe0 port 1 .*: GID index 1: fe80:.*, RoCE v2 on eth0$'
expect_line "rxe0 ACTIVE" "$out" '^ok +rxe0 port 1 .*: RoCE v2 GID index 3 for IPv4 10\.0\.0\.1 \(cordma picks it for that address; or builder::gid_index\(3\)\)$'
no_line "rxe0 ACTIVE" "$out" 'GID index 4'
expect_line "rxe0 ACTIVE" "$out" '^ok +kernel module rdma_rxe: loaded$'
expect_line "rxe0 ACTIVE" "$out" '^ok +.*/infiniband/uverbs\*: uverbs0, readable and writable$'
no_line "rxe0 ACTIVE" "$out" '^MISSING'
expect_line "rxe0 ACTIVE" "$out" '^doctor: cordma can run here \([0-9]+ warning\(s\)\)$'
# --quiet: no ok or info line, the verdict still last.
out=$(DOCTOR_SYSFS="$fake/sys" DOCTOR_DEV="$fake/dev" "$doctor" --quiet 2>&1)
no_line "--quiet" "$out" '^(ok|info) '
expect_line "--quiet" "$(tail -1 <<<"$out")" '^doctor: cordma can run here'

# 3. The same port, its link down.
echo "1: DOWN" > "$port/state"
run "rxe0 DOWN" 1 DOCTOR_SYSFS="$fake/sys" DOCTOR_DEV="$fake/dev"
expect_line "rxe0 DOWN" "$out" '^WARN +rxe0 port 1 \(Ethernet, netdev eth0\): DOWN, not ACTIVE$'
expect_line "rxe0 DOWN" "$out" 'fix: sudo ip link set eth0 up'
expect_line "rxe0 DOWN" "$out" '^MISSING +ACTIVE ports: none of rxe0 has one$'
echo "4: ACTIVE" > "$port/state"

# 4. A locked-memory limit of 64 KiB (a common container default).
out=$(bash -c 'ulimit -l 64 && exec "$0" "$@"' "$doctor" 2>&1)
expect_line "memlock 64 KiB" "$out" "^WARN +locked memory \(RLIMIT_MEMLOCK\): 64 KiB \(65536 bytes\), below the 8192 KiB \(8388608 bytes\) recommended: cordma's default builder registers its memory pool in 4096 KiB chunks \(4194304 bytes\)"
expect_line "memlock 64 KiB" "$out" "fix: a user: /etc/security/limits.d/90-rdma.conf with the lines '[^ ]+ soft memlock unlimited'"
expect_line "memlock 64 KiB" "$out" 'fix: a systemd service: LimitMEMLOCK=infinity'
expect_line "memlock 64 KiB" "$out" 'fix: a container: docker run --ulimit memlock=-1 --device /dev/infiniband --cap-add IPC_LOCK'
out=$(bash -c 'ulimit -l unlimited 2>/dev/null || exit 0; exec "$0" "$@"' "$doctor" 2>&1)
[ -z "$out" ] || expect_line "memlock unlimited" "$out" '^ok +locked memory \(RLIMIT_MEMLOCK\): unlimited$'

# 5. This host, if it has no RDMA (CI, and this project's machines).
if [ ! -d /sys/class/infiniband ] || [ -z "$(ls -A /sys/class/infiniband)" ]; then
  run "this host, without RDMA" 1
  expect_line "this host" "$out" '^MISSING +RDMA devices \(/sys/class/infiniband\): none$'
  expect_line "this host" "$out" '^MISSING +kernel module rdma_rxe: '
else
  echo "doctor_test: this host has RDMA devices ($(ls /sys/class/infiniband)); case 5 is for hosts without"
fi

# --help, and an unknown option.
"$doctor" --help | grep -q '^Usage: tools/doctor' || fail "--help prints no usage"
"$doctor" --bogus >/dev/null 2>&1; [ $? = 2 ] || fail "an unknown option does not exit with status 2"

[ "$failures" -eq 0 ] || { echo "doctor_test: $failures failure(s)"; exit 1; }
echo "doctor_test: ok"
