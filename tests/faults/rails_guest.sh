# Inside tools/rxe-vm -n 2 --rails 2: one connection over both rails
# (builder::rails) from host 2 to host 1, twice (tests/faults/faults.sh
# rails): first with 5% of rail 1's packets lost (from host 2) for the
# whole transfer, then with rail 1's link on host 2 taken down once 30% is
# written and brought back up at the end: rail 1 must come back (admitted
# again on new queue pairs) and carry a further 32 MiB. Then an rpc server
# on host 1 and 8 clients on host 2 over both rails, 60 s of 512 KiB calls
# (striped both ways) while rail 1's link on host 2 goes down at 10 s and
# 30 s, back up 10 s later each time: every call answered exactly once,
# and every client's rail 1 back and carrying reads at the end. Env: BUILD, LIMIT_MS (the longest one operation may take).
set -u
rp="$BUILD/tests/rails_peer"
rrp="$BUILD/tests/rails_rpc_peer"
size=$((128 << 20))
case "$RXE_VM_HOST" in
  1)
    "$rp" serve 10.78.0.1:7630 "$size" --clients 2 || exit 1
    exec "$rrp" serve 10.78.0.1:7631 ;;
  2)
    # Under loss rxe resets a QP's retry count only when a work request
    # completes, so a piece of megabytes (hundreds of packets, 5% of them
    # lost) can run out of retries: the rail is then down and its pieces go
    # on rail 0. Either way every byte must arrive and no operation fail.
    "$rp" write 10.78.0.1:7630 "$size" --fault-at 0 --fault 'tc qdisc add dev eth1 root netem loss 5%' \
      --after 'tc qdisc del dev eth1 root' --allow-down 1 || exit 1
    "$rp" write 10.78.0.1:7630 "$size" --fault-at 30 --fault 'ip link set eth1 down' \
      --after 'ip link set eth1 up' --stall-limit "$LIMIT_MS" --expect-down 1 --readmit 1 || exit 1
    exec "$rrp" call 10.78.0.1:7631 --clients 8 --seconds 60 --flap-at 10 --flap-at 30 \
      --down 'ip link set eth1 down' --up 'ip link set eth1 up' ;;
  *) echo "rails_guest.sh: nothing for host $RXE_VM_HOST" >&2; exit 2 ;;
esac
