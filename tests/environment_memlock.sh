#!/usr/bin/env bash
# environment_memlock: what a user without CAP_IPC_LOCK under a small
# locked-memory limit sees (a container's default is 8 MiB, some 64 KiB;
# root never sees it, which is why the rest of the suite cannot). Runs
# environment_test's hidden [.memlock] case with CAP_IPC_LOCK dropped from
# the bounding set (so not even root gets it back) and RLIMIT_MEMLOCK at
# 4 MiB: the default builder must fail with cordma::errc::memlock_limit,
# a message naming the limit and the fix, and builder::pool_chunk_size
# must get a connection through.
# Usage: tests/environment_memlock.sh ENVIRONMENT-TEST-EXECUTABLE
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: environment_memlock.sh ENVIRONMENT-TEST" >&2; exit 2; }
for tool in setpriv prlimit; do
  command -v "$tool" >/dev/null 2>&1 || { echo "environment_memlock: $tool (util-linux) is not installed" >&2; exit 1; }
done
# One process per section: what one section pins (a server's handshake
# still finishing as its listener closes) must not count against the next.
for section in "the default builder's 4 MiB chunk passes the limit" \
               "with 64 KiB chunks the same connection carries data"; do
  out=$(setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \
    prlimit --memlock=4194304:4194304 "$1" '[.memlock]' -c "$section" --durations yes) || { echo "$out"; exit 1; }
  echo "$out"
  # Catch runs none and passes when -c names no section: fail instead.
  grep -qF " s: $section" <<<"$out" || { echo "environment_memlock: no section named '$section' ran" >&2; exit 1; }
done
