#!/usr/bin/env python3
"""How busy the host is with work that is not ours, for bench/stream/run.

The measurements run in a TCG VM whose vCPUs are host threads: any other
work on the host's cores (another VM, a compiler) slows and scatters them.
"Ours" is the process tree under OWNER_PID (the run script: its VM and
everything in it). Other work is the host's busy CPU time (/proc/stat,
which counts short-lived processes too) minus our tree's.

  host_load.py wait OWNER_PID SECONDS   return once the others have used
                                        under 0.2 cores for 10 s and no
                                        other QEMU runs, or after SECONDS;
                                        exit 1 if it is still busy then
  host_load.py sample OWNER_PID OUT     every 5 s until OWNER_PID ends,
                                        append "epoch cores_used_by_others
                                        other_qemus" to OUT
"""

import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait
    return sum(v) - v[3] - (v[4] if len(v) > 4 else 0)


def processes():
    """{pid: (ppid, comm, utime + stime in jiffies)}"""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[int(d)] = (int(f[1]), comm, int(f[11]) + int(f[12]))
    return out


def ours(procs, owner):
    mine = set()
    for pid in procs:
        p, seen = pid, 0
        while p > 1 and p in procs and seen < 64:
            if p == owner:
                mine.add(pid)
                break
            p, seen = procs[p][0], seen + 1
    return mine


class Meter:
    def __init__(self, owner):
        self.owner = owner
        self.last_busy = busy_jiffies()
        self.last_mine = self.snapshot()[0]
        self.last_t = time.monotonic()

    def snapshot(self):
        procs = processes()
        mine = ours(procs, self.owner)
        now = {pid: procs[pid][2] for pid in mine}
        others_qemu = sum(1 for pid, (_, comm, _) in procs.items() if comm.startswith("qemu-system") and pid not in mine)
        return now, others_qemu

    def step(self):
        """Cores used by others since the last step, and other QEMUs now."""
        now, others_qemu = self.snapshot()
        busy = busy_jiffies()
        t = time.monotonic()
        mine_delta = sum(v - self.last_mine.get(pid, 0) for pid, v in now.items())
        # A process of ours that ended took its last interval's time with it;
        # only its reaped children's cutime would show it. Small: our own
        # short-lived processes run inside the VM, not here.
        others = max(0, (busy - self.last_busy) - mine_delta) / TICK / max(t - self.last_t, 1e-3)
        self.last_busy, self.last_mine, self.last_t = busy, now, t
        return min(others, CPUS), others_qemu


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("wait", "sample"):
        sys.exit(__doc__)
    owner = int(sys.argv[2])
    meter = Meter(owner)
    if sys.argv[1] == "wait":
        deadline = time.monotonic() + float(sys.argv[3])
        quiet = 0
        while True:
            time.sleep(5)
            cores, qemus = meter.step()
            quiet = quiet + 1 if cores < 0.2 and qemus == 0 else 0
            if quiet >= 2:
                return 0
            if time.monotonic() >= deadline:
                return 1
    with open(sys.argv[3], "a") as out:
        while True:
            time.sleep(5)
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                return 0
            cores, qemus = meter.step()
            out.write(f"{int(time.time())} {cores:.2f} {qemus}\n")
            out.flush()


if __name__ == "__main__":
    sys.exit(main())
