#!/bin/bash
f=0
for i in $(seq 1 30); do
  if ! setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock prlimit --memlock=4194304:4194304 build-dev/tests/environment_test '[.memlock]' > /tmp/memlock_$i.txt 2>&1; then f=$((f+1)); echo "run $i failed"; fi
  grep DIAG /tmp/memlock_$i.txt
done
echo "failures $f"
