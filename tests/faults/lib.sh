# Shell helpers of the faults suite's guest scripts (sourced inside
# tools/rxe-vm's VMs). Readiness, never sleeps: each wait polls for the
# thing itself (a line in a log, a TCP port that accepts), with a bound,
# and fails naming what it waited for.

say() { echo "faults[$RXE_VM_HOST]: $*"; }
die() { echo "faults[$RXE_VM_HOST]: FAILED: $*" >&2; exit 1; }

# wait_line FILE REGEX SECONDS: until FILE has a line matching REGEX.
wait_line() {
  local file=$1 regex=$2 limit=$3 waited=0
  until grep -qE "$regex" "$file" 2>/dev/null; do
    [ "$waited" -lt $((limit * 10)) ] || die "no line matching '$regex' in $file within $limit s: $(tail -n 5 "$file" 2>/dev/null)"
    sleep 0.1; waited=$((waited + 1))   # polling the log, not waiting for time to pass
  done
}

# gate_open PORT: accept TCP connections on PORT (in the background) to
# tell the other hosts this one is ready; gate_close stops it.
gate_open() {
  python3 -c 'import socket,sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(16)
while True: s.accept()[0].close()' "$1" &
  gate_pid=$!
}
gate_close() { kill "$gate_pid" 2>/dev/null || true; }

# gate_wait HOST PORT SECONDS: until HOST:PORT accepts a TCP connection.
gate_wait() {
  python3 -c 'import socket,sys,time
host, port, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + limit
while True:
    try:
        socket.create_connection((host, port), timeout=1).close(); break
    except OSError:
        if time.monotonic() > end: sys.exit("no answer from %s:%d within %g s" % (host, port, limit))
        time.sleep(0.2)' "$1" "$2" "$3" || die "host $1 was not ready (port $2) within $3 s"
}

# finish NAME PID: wait for a background process; count its failure.
failures=0
finish() {
  local name=$1 pid=$2 rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -eq 0 ]; then say "$name: ok"; else say "$name: FAILED (exit $rc)"; failures=$((failures + 1)); fi
}

