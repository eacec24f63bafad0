# Inside tools/rxe-vm -n 2 or -n 3: one host fails under operations in
# flight from another (tests/faults/faults.sh linkdown and poweroff).
# Env: BUILD, SCENARIO, LIMIT_MS (how fast the operations must fail).
set -u
fp="$BUILD/tests/fault_peer"
case "$SCENARIO.$RXE_VM_HOST" in
  linkdown.1)
    # Serves the client's old connection and, after the link is back, its
    # new one. The link goes down for 4 s just before the reply to echo 50,
    # whose send then fails here at once: this side's connection ends while
    # its link is down (the case that once wedged Soft-RoCE's connection
    # manager: cm_id.cpp keeps the id until the port is up). The old
    # connection is given up after 15 s of silence if it has not failed.
    exec "$fp" serve 10.78.0.1:7620 --clients 2 --may-fail 1 --idle 15 --fault-after 50 \
      --fault-before-reply 'ip link set eth0 down; echo "link down"; (sleep 4; ip link set eth0 up; echo "link up") &' ;;
  linkdown.2)
    exec "$fp" pressure 10.78.0.1:7620 --ops 1000 --fail-within "$LIMIT_MS" --reconnect ;;
  poweroff.1)
    # The survivor: serves host 3's traffic (4 connections) and, once that
    # runs, puts 1,000 operations in flight to host 2. It is loaded (a busy
    # loop shares its one vCPU), as the dead host must be found all the same.
    # Every host here acknowledges after 268 ms a try (--ack-timeout 16),
    # not the default 67 ms: rxe's acknowledgements are its VM's kernel,
    # and this loaded VM, one of three emulated ones on two host cores,
    # stopped answering for over the default's 0.47 s in about one run of
    # eight (every connection touching it failed with "retry counter
    # exceeded" while every host was alive). A real NIC acknowledges
    # whatever its host's CPUs do. At 7 x 268 ms the power-off is still
    # found within LIMIT_MS (2.7-3.4 s measured, 2026-12-06).
    yes > /dev/null &
    exec "$fp" serve 10.78.0.1:7620 --clients 4 --pressure-to 10.78.0.2:7620 --ops 1000 --fail-within "$LIMIT_MS" \
      --ack-timeout 16 ;;
  poweroff.2)
    # 50 echoes in, this host is gone at once: no disconnect reaches
    # anyone. sysrq 'b' resets the machine without shutting anything down
    # (tools/rxe-vm runs QEMU with -no-reboot, so the VM just ends); 'o',
    # an orderly power-off, can take minutes in an emulated CPU under the
    # peer's retransmissions.
    exec "$fp" serve 10.78.0.2:7620 --clients 1 --ack-timeout 16 \
      --fault 'echo 0 > "$RXE_VM_RC"; sync; echo b > /proc/sysrq-trigger' --fault-after 50 ;;
  poweroff.3)
    # Until host 1 says it is done (it has seen host 2's operations fail
    # while this traffic went on), not for a fixed time: on a loaded host
    # the power-off can come later than any duration chosen here.
    exec "$fp" traffic 10.78.0.1:7620 --seconds 240 --until-told --ack-timeout 16 ;;
  *) echo "pressure_guest.sh: nothing for $SCENARIO on host $RXE_VM_HOST" >&2; exit 2 ;;
esac
