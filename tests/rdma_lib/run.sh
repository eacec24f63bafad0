#!/usr/bin/env bash
# rdma_lib's documented server and client, compiled unchanged against an
# installed cordma, run on this host's RDMA device: one server, two clients.
#
# Why: rdma_lib.h promises that rdma_lib programs "compile unchanged against
# cordma and behave as rdma_lib documents". tests/rdma_lib/server.c and
# client.c are rdma_lib's documented example programs byte for byte; the only
# edit is the one a user makes too, the hard-coded server address
# "192.168.50.59", replaced here (with sed, in copies) by this host's RDMA
# address. Each is compiled exactly as rdma_lib.h says,
#   gcc -std=c11 prog.c $(pkg-config --cflags --libs cordma)
# against cordma installed into a temporary DESTDIR (as tests/install_test.sh
# does), without -Werror: the documented client calls atoi without
# <stdlib.h>, which gcc 12 under -std=c11 only warns about ("implicit
# declaration of function 'atoi'"); the program is rdma_lib's, so the warning
# stays and is shown.
#
# Then: the server starts (under stdbuf -oL, so its lines come as printed);
# client 1 starts once the server says "Waiting for client 1...", client 2
# once it says "Client 1 connected" (the server numbers clients in accept
# order, and the expected text lists them in that order). All three must exit
# 0 and print
#   Received combined messages: 'Server Message; Client 1 Message; Client 2 Message;'
# Readiness, not sleeps: the server's output comes through a fifo and each
# wait is a bounded read of its next line. Every wait is bounded (60 s for a
# line, 60 s for a client, 120 s for the server).
#
# Usage: tests/rdma_lib/run.sh BUILD-DIR SOURCE-DIR
#   (registered in tests/meson.build as rdma_lib_example, suite rxe; needs
#   RXE_VM_ADDR inside tools/rxe-vm or CORDMA_TEST_ADDR natively)
set -euo pipefail

fail() { echo "rdma_lib_example: FAIL: $*" >&2; exit 1; }
step() { echo "rdma_lib_example: $*"; }

[ $# -eq 2 ] || { echo "usage: run.sh BUILD-DIR SOURCE-DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || fail "build directory '$1' does not exist"
src=$(cd "$2" && pwd) || fail "source directory '$2' does not exist"
addr=${CORDMA_TEST_ADDR:-${RXE_VM_ADDR:-}}
[ -n "$addr" ] || fail "no RDMA address: run it inside tools/rxe-vm (RXE_VM_ADDR), or set CORDMA_TEST_ADDR"
for tool in meson pkg-config gcc stdbuf timeout; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (run tools/install-deps)"
done

tmp=$(mktemp -d /tmp/cordma-rdma-lib.XXXXXX)
fifo_dir="" pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -z "$fifo_dir" ] || rm -rf "$fifo_dir"
  rm -rf "$tmp"
}
trap cleanup EXIT

# 1. cordma installed into a DESTDIR, found through its cordma.pc.
# shellcheck source=tests/support/installed_cordma.sh
. "$src/tests/support/installed_cordma.sh"
installed_cordma "$build" "$tmp" || fail "could not install cordma (see above)"
dest=$installed_cordma_dest

# 2. The documented programs with this host's address, compiled each in its
# own folder exactly as documented (to a.out).
for prog in server client; do
  mkdir -p "$tmp/$prog"
  sed "s|\"192\.168\.50\.59\"|\"$addr\"|" "$src/tests/rdma_lib/$prog.c" > "$tmp/$prog/$prog.c"
  grep -q "\"$addr\"" "$tmp/$prog/$prog.c" || fail "$prog.c: the address 192.168.50.59 was not found to replace"
  changed=$(diff "$src/tests/rdma_lib/$prog.c" "$tmp/$prog/$prog.c" | grep -c '^[<>]' || true)
  [ "$changed" -eq 2 ] || fail "$prog.c: expected the one address line to change, $changed lines differ"
  step "gcc -std=c11 $prog.c \$(pkg-config --cflags --libs cordma)"
  # shellcheck disable=SC2046 # pkg-config's output is a list of flags
  if ! (cd "$tmp/$prog" && gcc -std=c11 "$prog.c" $(pkg-config --cflags --libs cordma)) >"$tmp/$prog.cc.log" 2>&1; then
    cat "$tmp/$prog.cc.log" >&2
    fail "the documented $prog.c does not compile against the installed cordma (output above)"
  fi
  if [ -s "$tmp/$prog.cc.log" ]; then
    echo "rdma_lib_example: $prog.c compiled, with the compiler saying (the program is rdma_lib's, unchanged):"
    sed 's/^/  | /' "$tmp/$prog.cc.log"
  fi
  used=$(ldd "$tmp/$prog/a.out" | awk '$1 ~ /^libcordma\.so/ { print $3 }')
  case "$used" in
    "$dest"/*) ;;
    *) fail "$prog resolves libcordma to '${used:-nothing}', not the install in $dest" ;;
  esac
done

# 3. The server, its output through a fifo. The guest's /tmp is the host's
# over 9p, which cannot hold a fifo: use the first of $XDG_RUNTIME_DIR,
# /dev/shm, /run and $TMPDIR that can (as tools/lib/server-then-client does).
for base in "${XDG_RUNTIME_DIR:-}" /dev/shm /run "${TMPDIR:-/tmp}"; do
  if [ -z "$base" ] || [ ! -d "$base" ] || [ ! -w "$base" ]; then continue; fi
  fifo_dir=$(mktemp -d "$base/rdma-lib-example.XXXXXX" 2>/dev/null) || continue
  mkfifo "$fifo_dir/server" 2>/dev/null && break
  rm -rf "$fifo_dir"; fifo_dir=""
done
[ -n "$fifo_dir" ] || fail "found no directory that can hold a fifo"
(cd "$tmp/server" && exec timeout 120 stdbuf -oL ./a.out) >"$fifo_dir/server" 2>"$tmp/server.err" &
server_pid=$!
pids+=("$server_pid")
exec 3<"$fifo_dir/server"   # returns once the server's side is open too
rm -rf "$fifo_dir"; fifo_dir=""
: > "$tmp/server.out"

# Reads the server's lines (showing and keeping each) until one contains
# TEXT, for at most S seconds in all.
wait_for_line() {  # TEXT S
  local text=$1 deadline=$((SECONDS + $2)) left line
  while :; do
    left=$((deadline - SECONDS))
    [ "$left" -gt 0 ] || { step "the server did not print '$text' within $2 s"; return 1; }
    IFS= read -r -t "$left" line <&3 || { step "the server's output ended before '$text'"; return 1; }
    printf 'server| %s\n' "$line"
    printf '%s\n' "$line" >> "$tmp/server.out"
    case $line in *"$text"*) return 0 ;; esac
  done
}
server_failed() {
  echo "rdma_lib_example: the server's stderr:" >&2
  sed 's/^/  | /' "$tmp/server.err" >&2
  for id in 1 2; do
    [ -f "$tmp/client$id.out" ] || continue
    echo "rdma_lib_example: client $id's output:" >&2
    sed 's/^/  | /' "$tmp/client$id.out" "$tmp/client$id.err" >&2
  done
  fail "$*"
}

start_client() {  # ID
  (cd "$tmp/client" && exec timeout 60 stdbuf -oL ./a.out "$1" "$addr") >"$tmp/client$1.out" 2>"$tmp/client$1.err" &
  client_pid[$1]=$!
  pids+=("${client_pid[$1]}")
  step "started client $1"
}
declare -a client_pid
wait_for_line "Waiting for client 1..." 60 || server_failed "the server never waited for client 1"
start_client 1
wait_for_line "Client 1 connected" 60 || server_failed "client 1 never connected"
start_client 2
wait_for_line "Client 2 connected" 60 || server_failed "client 2 never connected"
wait_for_line "Received combined messages" 60 || server_failed "the server's all-to-all did not finish"
# The rest of its output, to its end (it exits, or timeout 120 ends it).
while IFS= read -r -t 60 line <&3; do printf 'server| %s\n' "$line"; printf '%s\n' "$line" >> "$tmp/server.out"; done
exec 3<&-

# 4. Everyone exited 0 and got the same text.
expected="Received combined messages: 'Server Message; Client 1 Message; Client 2 Message;'"
rc=0
wait "$server_pid" || rc=$?
[ "$rc" -eq 0 ] || server_failed "the server exited with status $rc"
grep -qxF "$expected" "$tmp/server.out" || server_failed "the server did not print: $expected"
for id in 1 2; do
  rc=0
  wait "${client_pid[$id]}" || rc=$?
  sed "s/^/client $id| /" "$tmp/client$id.out" "$tmp/client$id.err"
  [ "$rc" -eq 0 ] || server_failed "client $id exited with status $rc"
  grep -qxF "$expected" "$tmp/client$id.out" || server_failed "client $id did not print: $expected"
done
pids=()
step "OK: the server and both clients printed: $expected"
