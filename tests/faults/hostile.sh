#!/usr/bin/env bash
# faults_hostile: hostile peers against a cordma server, across two hosts.
#
# Boots tools/rxe-vm -n 2 (one VM each, their rxe devices joined by a real
# link). Host 1 runs tests/support/hostile_target, a server with the agent
# over rdma_cm and over the TCP endpoint exchange, a cordma::rpc server
# and a cordma::stream listener. Host 2 runs a well-behaved client of all
# four (hostile_target client: checked round trips without pause), then
# every scenario of tests/support/hostile_peer (raw verbs and librdmacm,
# no cordma), one process each. For each scenario:
#   - the hostile peer must see its own connection refused or closed (or,
#     for a forged rkey, its own QP fail; for a request over a limit, a
#     refusal), within its bounds;
#   - the target's stderr must have, after the scenario's mark, a line
#     naming the violation (the table below: `expect`), or none closing
#     the connection when the scenario breaks no rule (`absent`);
#   - the well-behaved client must still be running (it exits at once if
#     a byte is wrong, a call fails or a loop stalls for 10 s);
# and where a scenario holds a connection half-open (`stall`), a new
# client (hostile_target probe) must be served meanwhile. After every
# group of scenarios a probe must be served too. At the end the target's
# QPs, CQs, MRs, PDs, rdma_cm ids, descriptors and connections must be
# back to their values before the first scenario (`settle`: MRs may exceed
# them by the memory pool's new chunks, which it keeps by design), the
# client must stop cleanly with every byte checked, and the target must
# exit 0 (never crash). Every wait is bounded; a failure stops the run at
# once with a line "FAIL scenario NAME: ...".
#
# Usage: hostile.sh SOURCE_ROOT BUILD_DIR [ONLY]     (natively: boots the VMs)
#        hostile.sh --host SOURCE_ROOT BUILD_DIR [ONLY]  (inside each VM)
# ONLY (an extended regular expression) runs only the scenarios it
# matches, for working on one; the test runs them all.
set -uo pipefail

target_ip=10.78.0.1
base=7800

if [ "${1:-}" != --host ]; then
  src=$1 build=$2 only=${3:-}
  work="$build/tests/faults-hostile"
  rm -rf "$work" && mkdir -p "$work"
  start=$(date +%s)
  "$src/tools/rxe-vm" -n 2 -t 330 -- bash "$src/tests/faults/hostile.sh" --host "$src" "$build" "$only" |
    tee "$work/run.log"
  rc=${PIPESTATUS[0]}
  # Host 1's long output follows host 2's: repeat the failure last, where
  # a log cut to its end still shows it.
  if [ $rc != 0 ]; then
    echo "faults_hostile: what failed (repeated from above):"
    grep '^\[h2\] ' "$work/run.log" | grep -v 'target\.err: ' | grep -B 15 'FAIL' | tail -n 16
    grep -E '^\[h[0-9]\] (FAIL|  target\.err: |driver: the end)|^rxe-vm:' "$work/run.log" | grep -v 'FAIL scenario' | tail -n 30
  fi
  echo "faults_hostile: $( [ $rc = 0 ] && echo passed || echo "FAILED ($rc)" ) in $(( $(date +%s) - start )) s (VM boot included)"
  exit $rc
fi

src=$2 build=$3 only=${4:-}
work="$build/tests/faults-hostile"
target="$build/tests/hostile_target"
peer="$build/tests/hostile_peer"

# ---- host 1: the target ---------------------------------------------------
if [ "$RXE_VM_HOST" = 1 ]; then
  log="$work/target.err"
  timeout 300 "$target" serve $target_ip $base "$log" > "$work/target.out" 2> "$log"
  rc=$?
  sed 's/^/target: /' "$work/target.out" "$log"
  case $rc in
    0) echo "target: exited 0" ;;
    124) echo "FAIL: the target was still running after 300 s"; exit 1 ;;
    *) [ $rc -gt 128 ] && echo "FAIL: the target crashed (signal $((rc - 128)))" || echo "FAIL: the target exited $rc"
       exit 1 ;;
  esac
  exit 0
fi

# ---- host 2: the driver, the well-behaved client and the hostile peers ----
# Bash's process substitution reads /dev/fd, which the VM's fresh devtmpfs
# lacks.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
scenario=setup
client_pid=""
ctl_open=""
# However the driver ends, the target is told (or it would wait out its
# own 300 s), and the client is stopped.
finish() {
  [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null
  [ -n "$ctl_open" ] && { echo quit >&3; } 2>/dev/null
}
trap finish EXIT
fail() {
  echo "FAIL scenario $scenario: $*"
  # The target's log is on the shared filesystem: show its end here, as
  # host 1's own output may be cut short once this host has failed.
  echo "driver: the end of the target's log ($work/target.err):"
  # 9p's cache=loose keeps this host's copy of the file: drop it, or the
  # tail shows the log as it was when this host last read it.
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
  tail -n 25 "$work/target.err" 2>/dev/null | cut -c1-400 | sed 's/^/  target.err: /'
  exit 1
}

# Asks the target (control port) and puts its one-line answer in $reply.
# A slow live target is waited for: its connection stays open, and a host
# whose cores are busy (a build beside the suite) once took more than the
# 60 s this used to allow. A dead one closes it (its kernel ends the
# connection), and read sees the end at once. At most 300 s in all.
ctl() {
  echo "$*" >&3 || fail "the target's control connection is gone (did it crash?)"
  local waited=0 rc
  while :; do
    read -r -t 20 -u 3 reply && return 0
    rc=$?
    [ "$rc" -gt 128 ] || fail "the target closed its control connection before answering '$*' (did it crash?)"
    waited=$((waited + 20))
    [ "$waited" -lt 300 ] || fail "no answer from the target to '$*' within 300 s, its control connection still open"
  done
}

# The target's control port opens once every listener listens; host 1 may
# still be booting, and across hosts the connect itself is the only way to
# know: try for up to 150 s.
for attempt in $(seq 1 300); do
  if exec 3<>"/dev/tcp/$target_ip/$((base + 4))"; then ctl_open=1; break; fi 2>/dev/null
  sleep 0.5
done
[ -n "$ctl_open" ] || fail "the target's control port $target_ip:$((base + 4)) never opened"
read -r -t 30 -u 3 ready || fail "no readiness line from the target"
case "$ready" in ready*) echo "driver: target $ready" ;; *) fail "the target greeted with '$ready'" ;; esac

# The well-behaved client, for the whole run.
exec {client_out}< <(exec "$target" client $target_ip $base 2>&1)
client_pid=$!
read -r -t 60 -u "$client_out" line || fail "the well-behaved client printed nothing within 60 s"
case "$line" in "client: serving"*) echo "driver: $line" ;; *) fail "the well-behaved client: $line" ;; esac
ctl baseline
echo "driver: baseline: $reply"

client_alive() {
  kill -0 "$client_pid" 2>/dev/null && return 0
  local rest; rest=$(timeout 5 cat <&"$client_out")
  fail "the well-behaved client stopped: $rest"
}

probe() {
  local out
  out=$(timeout 40 "$target" probe $target_ip $base 2>&1) || fail "a new client was not served: $out"
  echo "  $out"
}

# NAME  PORT-OFFSET  CHECK  REGEX (extended, on the target's stderr)
#   CHECK: expect (a line must match), absent (none may match: the
#   scenario breaks no rule), stall (expect, and a probe must be served
#   while the hostile peer holds its connection half-open).
peer_re='10\.78\.0\.2:[0-9]+'
scenarios=$(cat <<EOF
cm-bad-magic 0 expect ^cordma: listener 10\.78\.0\.1:$base: refused a client from $peer_re: its connect request carries no cordma hello
cm-short 0 expect ^cordma: listener 10\.78\.0\.1:$base: refused a client from $peer_re: its connect request carries no cordma hello
cm-bad-kind 0 expect ^cordma: listener 10\.78\.0\.1:$base: refused a client from $peer_re: its connect request carries no cordma hello
cm-unknown-token 0 expect ^cordma: listener 10\.78\.0\.1:$base: refused an agent control queue pair from $peer_re: its token matches no connection
cm-no-rtu 0 stall ^cordma: listener 10\.78\.0\.1:$base: dropped a client: accept from $peer_re: 
cm-data-only 0 expect ^hostile_target: agent rdma_cm connection from $peer_re ended
group
tcp-garbage 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*malformed endpoint message from the peer: field 'magic' is 0xabababab
tcp-short 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*waiting for the peer's endpoint
tcp-stall 1 stall ^cordma: listener .*: dropped a client from $peer_re: .*timed out
tcp-bad-version 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*field 'version' is 9
tcp-bad-qpn 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*field 'qpn' is 0
tcp-bad-mtu 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*field 'mtu' is 9
tcp-bad-flags 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*field 'flags' is 128
tcp-agent-mismatch 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*the peer has builder::agent\(false\)
tcp-bad-control 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*malformed agent endpoint message from the peer: field 'magic'
tcp-bad-ready 1 expect ^cordma: listener .*: dropped a client from $peer_re: .*malformed ready message from the peer: byte is 88
tcp-agent-garbage 1 expect ^cordma: agent protocol violation by $peer_re: agent message: bad magic 0xdead
group
agent-truncated 0 expect ^cordma: agent protocol violation by $peer_re: agent message: 5 bytes is shorter than the 8-byte header
agent-bad-magic 0 expect ^cordma: agent protocol violation by $peer_re: agent message: bad magic 0x1234
agent-bad-version 0 expect ^cordma: agent protocol violation by $peer_re: agent message: version 7 not supported
agent-unknown-type 0 expect ^cordma: agent protocol violation by $peer_re: agent message: unknown message type 9
agent-bad-length 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr header says body_length 24 but 20
agent-oversize 0 expect ^cordma: agent protocol violation by $peer_re: a message longer than the 256-byte receive buffers
agent-size-zero 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.size is 0
agent-size-2^40+1 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.size 1099511627777 is over 2\^40
agent-size-2^63 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.size 9223372036854775808 is over 2\^40
agent-size-limit 0 absent violation|closing
agent-bad-alignment 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.alignment 3 is not a power of two
agent-huge-alignment 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.alignment 1048576 is not a power of two
agent-request-id-zero 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.request_id is 0
agent-bad-access 0 expect ^cordma: agent protocol violation by $peer_re: agent message: request_mr\.access 0x0*101 has bits other than
agent-release-never-granted 0 expect ^cordma: agent protocol violation by $peer_re: release_mr of region 4242, which this side never granted
agent-return-never-granted 0 expect ^cordma: agent protocol violation by $peer_re: return_mr of region 4242, which this side never granted
agent-ack-beyond 0 expect ^cordma: agent protocol violation by $peer_re: agent message: acked 5 acknowledges 5 messages, but only 0 are unacknowledged
agent-grant-unasked 0 expect ^cordma: agent protocol violation by $peer_re: an answer to request 77, which was never made
agent-flood 0 expect ^hostile_target: agent rdma_cm connection from $peer_re ended
group
forged-rkey 0 expect ^hostile_target: agent rdma_cm connection from $peer_re ended
forged-beyond-grant 0 expect ^hostile_target: agent rdma_cm connection from $peer_re ended
forged-after-release 0 expect ^hostile_target: agent rdma_cm connection from $peer_re ended
group
rpc-no-hello 2 expect ^cordma::rpc::server: refused a client from $peer_re: its hello is malformed
rpc-bad-hello 2 expect ^cordma::rpc::server: refused a client from $peer_re: its hello is malformed: a frame without cordma::rpc's magic number
rpc-short-frame 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a frame of 10 bytes, shorter than the shortest \(16-byte\) header; closing its connection
rpc-bad-magic 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a frame without cordma::rpc's magic number
rpc-bad-version 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a frame of protocol version 9
rpc-unknown-type 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a frame of unknown type 99
rpc-reserved 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a request_rts frame with its reserved bytes set
rpc-length-mismatch 2 expect ^cordma::rpc::server: client $peer_re: a malformed frame: a done frame of 58 bytes whose header says 0 bytes of payload
rpc-oversize 2 expect ^cordma: shared_receive_queue on [a-z0-9]+: closing the connection to $peer_re: .*longer than the queue's buffers
rpc-server-frame 2 expect ^cordma::rpc::server: client $peer_re: a response frame, which only a server sends
rpc-done-unknown 2 expect ^cordma::rpc::server: client $peer_re: a done frame for call 42, which has no response waiting
rpc-credit-overrun 2 expect ^cordma::rpc::server: client $peer_re: a call beyond its 16 credits
rpc-rts-too-large 2 absent closing
rpc-forged-rts 2 expect ^cordma::rpc::server: client $peer_re: reading its request of 1048576 bytes failed
rpc-heartbeat-write 2 absent closing
group
stream-bad-hello 3 expect ^cordma::stream_listener::accept: refused $peer_re: its hello is a frame without the link's magic number
stream-wrong-module 3 expect ^cordma::stream_listener::accept: refused $peer_re: the peer is a cordma C API context, this side a cordma stream
stream-window-zero 3 expect ^cordma::stream_listener::accept: refused $peer_re: its window of 0 frames is out of range
stream-huge-window 3 expect ^cordma::stream_listener::accept: refused $peer_re: its window of 4096 frames is out of range
stream-silent 3 stall ^cordma::stream_listener::accept: refused $peer_re: receive_queue::next from $peer_re: no message within 8000 ms
stream-bad-frame 3 expect ^cordma::stream to $peer_re: stream peer $peer_re sent a frame without the link's magic number
stream-unknown-op 3 expect ^cordma::stream to $peer_re: stream peer $peer_re sent a frame of unknown op 99
stream-ack-beyond 3 expect ^cordma::stream to $peer_re: stream peer $peer_re acknowledged 1000 frames but only 0 were outstanding
stream-ack-with-hello 3 expect ^cordma::stream to $peer_re: stream peer $peer_re acknowledged 1000 frames but only 0 were outstanding
stream-forged-rts 3 expect ^cordma::stream to $peer_re: reading .* from stream peer $peer_re failed
stream-oversize 3 expect ^cordma::stream to $peer_re: stream peer $peer_re sent a frame longer than the receive buffer it landed in \(256 bytes now
group
EOF
)

# Every scenario the peer knows must be in the table, and the reverse.
known=$("$peer" list | sort)
listed=$(echo "$scenarios" | awk '$1 != "group" { print $1 }' | sort)
[ "$known" = "$listed" ] || fail "hostile_peer list and this script's table differ: $(diff <(echo "$known") <(echo "$listed") | tr '\n' ' ')"

count=0
while read -r name offset check regex; do
  if [ "$name" = group ]; then
    scenario="(after the group)"
    probe
    continue
  fi
  [ -z "$only" ] || [[ "$name" =~ $only ]] || continue
  scenario=$name
  count=$((count + 1))
  ctl "mark $name"
  [ "$reply" = ok ] || fail "mark: $reply"
  echo "driver: scenario $name"
  began=$EPOCHREALTIME
  exec {hostile}< <(exec timeout 45 "$peer" "$name" "$target_ip:$((base + offset))" 2>&1)
  hostile_pid=$!
  if [ "$check" = stall ]; then
    # Once the peer holds its connection half-open, a new client must
    # still be served.
    while read -r -t 30 -u "$hostile" line; do
      echo "  $line"
      case "$line" in *"then nothing"*|*"sending no hello"*) break ;; esac
    done
    probe
    # Served while the half-open client still held on: the listener did
    # not wait for it (it holds on for the target's 8 s connect_timeout).
    kill -0 "$hostile_pid" 2>/dev/null || fail "the half-open client's hold ended before a new client was served: the listener waited for it"
  fi
  while read -r -t 60 -u "$hostile" line; do echo "  $line"; done
  wait "$hostile_pid"
  status=$?
  exec {hostile}<&-
  [ $status = 0 ] || fail "the hostile peer did not see what it expects (exit $status)"
  case "$check" in
    expect|stall)
      ctl "expect $regex"
      case "$reply" in
        ok*) echo "  target: ${reply#ok }" ;;
        *) fail "the target logged no line matching /$regex/ ($reply)" ;;
      esac ;;
    absent)
      # The peer has seen its refusal answered and the connection still
      # serving: a violation would have been logged by then.
      ctl "absent $regex"
      case "$reply" in
        missing) echo "  target: no line matching /$regex/, as expected (not a violation)" ;;
        *) fail "the target logged a line matching /$regex/ for a scenario that breaks no rule: ${reply#ok }" ;;
      esac ;;
  esac
  client_alive
  echo "  took $(awk -v a="$began" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s"
done <<< "$scenarios"

scenario="(end)"
ctl settle
case "$reply" in
  ok*) echo "driver: resources back to the baseline: ${reply#ok }" ;;
  *) fail "the target's resources did not come back: $reply" ;;
esac
client_alive
kill -TERM "$client_pid"
client_summary=$(timeout 30 cat <&"$client_out")
wait "$client_pid" || fail "the well-behaved client failed at the end: $client_summary"
echo "driver: $client_summary"
client_pid=""
ctl quit
ctl_open=""
echo "driver: $count scenarios passed"
