"""bench/compare's measuring half: runs next to the RDMA device (inside
tools/rxe-vm when the host has none), every group of the plan once per
repetition, the programs' order rotating, and writes every run to one JSON
file.

Before the repetitions, untimed (warm_up): each program once, UCX's with
UCX_LOG_LEVEL=info, whose lane lines show which transport and device UCX
chose (the proof that its traffic crossed the RDMA device, with the
device's packet counter, which is read around every run).

A run that fails is tried again, up to 3 times in all (perftest's clock
calibration fails now and then in a loaded VM; every failed attempt stays
in the JSON). One that fails 3 times stops the measuring at once: what
was measured so far is written, marked "aborted" with the reason, and the
exit status is 1.
"""

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time

import compare_plan
import compare_tools
from pair import PairError, ReadyPort, run_pair
from report_format import human


def sent_packets(device):
    try:
        return int(open(f"/sys/class/infiniband/{device}/ports/1/hw_counters/sent_pkts").read())
    except (OSError, ValueError):
        return None


def package_version(name):
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


class Ports:
    """A fresh port for every server (perftest's and UCX's TCP ports,
    cordma-perf's rdma_cm port): none is reused while a previous
    connection on it may linger."""

    def __init__(self, first=18515, count=400):
        self.first, self.count, self.next = first, count, 0

    def take(self):
        port = self.first + self.next % self.count
        self.next += 1
        return port


def measure_run(dev, ports, rep, g, run, timeout, say):
    """One run, up to 3 attempts; the record of it."""
    record = {"rep": rep, "group": g["group"], "bytes": g["bytes"], "tool": run["tool"], "label": run["label"],
              "result": None, "errors": [], "started": round(time.time(), 1)}
    t0 = time.monotonic()
    for attempt in (1, 2, 3):
        packets = sent_packets(dev.name)
        try:
            record["cmd"], record["result"] = compare_tools.RUNNERS[run["tool"]](dev, run["args"], ports.take(),
                                                                                 timeout)
        except (PairError, RuntimeError, ValueError) as e:
            record["errors"].append(str(e)[-3000:])
            say(f"{g['group']} {human(g['bytes'])} {run['label']} failed (attempt {attempt}): {e}")
            continue
        after = sent_packets(dev.name)
        record["device_sent_pkts"] = after - packets if None not in (packets, after) else None
        break
    record["seconds"] = round(time.monotonic() - t0, 2)
    return record


def summary(result):
    if result is None:
        return "failed"
    if "idle" in result:
        return ", ".join(f"{s['side']} {s['core_percent']:.3f}% of a core" for s in result["idle"])
    if "p50_us" in result:
        return f"p50 {result['p50_us']:.2f} us"
    return f"{result['mb_per_s']:.2f} MB/s, {result['msg_per_s']:.0f} msg/s"


def ucx_transport_check(dev, ports, test, timeout):
    """One short UCX ping-pong with UCX's info log: which lanes UCX built,
    and how many packets crossed the device."""
    port = ports.take()
    env = dict(compare_tools.ucx_env(dev.name), UCX_LOG_LEVEL="info")
    server = ["ucx_perftest", "-p", str(port)]
    client = ["ucx_perftest", dev.address, "-p", str(port), "-t", test, "-s", "8", "-n", "1000", "-w", "100"]
    before = sent_packets(dev.name)
    out, server_out = run_pair(f"ucx_perftest {test} (transport check)", server, client, ReadyPort(port), env=env,
                               client_within=timeout)
    after = sent_packets(dev.name)
    # "[...] ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: rma(rc_verbs/rxe0:1)"
    lanes = sorted({line[line.index("ep_cfg"):].strip() for line in (out + server_out).splitlines()
                    if "ep_cfg" in line})
    return {"test": test, "env": env, "client": client, "lanes": lanes,
            "device_sent_pkts": (after - before) if None not in (before, after) else None}


def warm_up(dev, ports, timeout, say):
    """Before the repetitions, untimed: each program once, so that the first
    measured runs do not pay for loading them (the VM reads the host's files
    over 9p) or for a guest still settling after boot; UCX's two runs also
    show which transport it takes."""
    checks = []
    for test in ("ucp_put_lat", "ucp_am_lat"):
        try:
            checks.append(ucx_transport_check(dev, ports, test, timeout))
        except (PairError, RuntimeError) as e:
            raise SystemExit(f"compare: ucx_perftest does not run over {dev.name}: {e}")
        c = checks[-1]
        say(f"UCX {test}: {c['device_sent_pkts']} packets on {dev.name}; lanes: {'; '.join(c['lanes']) or 'none'}")
    for tool, args in (("cordma", ["--op", "write", "--test", "lat", "-s", "8", "-n", "1000"]),
                       ("perftest", ["ib_write_lat", "-s", "8", "-n", "1000"])):
        try:
            compare_tools.RUNNERS[tool](dev, args, ports.take(), timeout)
        except (PairError, RuntimeError, ValueError) as e:
            raise SystemExit(f"compare: the warm-up run of {tool} failed: {e}")
    return checks


def measure(opts):
    device = os.environ.get("CORDMA_TEST_DEVICE") or os.environ.get("RXE_VM_DEVICE")
    address = os.environ.get("CORDMA_TEST_ADDR") or os.environ.get("RXE_VM_ADDR")
    if not device or not address:
        sys.exit("compare: CORDMA_TEST_DEVICE and CORDMA_TEST_ADDR must name the RDMA device and an IPv4 address "
                 "on it (bench/compare sets them through tools/lib/with-device)")
    for program in ("ib_write_lat", "ib_write_bw", "ib_send_lat", "ib_send_bw", "ucx_perftest", "ss"):
        if subprocess.run(["sh", "-c", f"command -v {program}"], capture_output=True).returncode != 0:
            sys.exit(f"compare: {program} is missing (tools/install-deps installs perftest, ucx-utils, iproute2)")
    gid = compare_tools.roce_v2_ipv4_gid_index(device)
    if gid is None:
        sys.exit(f"compare: {device} port 1 has no RoCE v2 IPv4 GID; perftest needs one (-x)")
    dev = compare_tools.Device(device, address, gid, opts.cordma_perf)
    groups = compare_plan.plan(opts.lat_sizes, opts.bw_sizes, opts.lat_iters, opts.rate_iters, opts.idle_seconds)
    total = opts.reps * sum(len(g["runs"]) for g in groups)
    say = lambda text: print(f"compare: {text}", file=sys.stderr, flush=True)
    say(f"{device} ({address}, GID index {gid}), {opts.reps} repetitions of {len(groups)} groups, {total} runs")

    ports = Ports()
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    started = time.monotonic()
    checks = warm_up(dev, ports, opts.timeout, say)

    runs = []
    aborted = None
    order = [(rep, g, run) for rep in range(1, opts.reps + 1) for g in groups
             for run in compare_plan.rotated(g["runs"], rep)]
    for done, (rep, g, run) in enumerate(order, 1):
        record = measure_run(dev, ports, rep, g, run, opts.timeout, say)
        runs.append(record)
        elapsed = int(time.monotonic() - started)
        say(f"[{done}/{total}] rep {rep} {g['group']} {human(g['bytes']) if g['bytes'] else ''} {run['label']}: "
            f"{summary(record['result'])} ({record['seconds']:.1f} s; {elapsed // 60}:{elapsed % 60:02d} so far)")
        if record["result"] is None:
            aborted = (f"rep {rep}, {g['group']} {human(g['bytes'])}, {run['label']} failed 3 times; the last: "
                       f"{record['errors'][-1][:600]}")
            break

    raw = {
        "device": device, "address": address, "gid_index": gid, "reps": opts.reps,
        "lat_sizes": opts.lat_sizes, "bw_sizes": opts.bw_sizes, "lat_iters": opts.lat_iters,
        "rate_iters": opts.rate_iters, "idle_seconds": opts.idle_seconds, "idle_qps": compare_plan.IDLE_QPS,
        "post_list": compare_plan.POST_LIST, "depth": compare_plan.DEPTH,
        "kernel": platform.release(), "hostname": socket.gethostname(), "cpus": os.cpu_count(),
        "in_rxe_vm": bool(os.environ.get("RXE_VM")),
        "versions": {"perftest": package_version("perftest"), "ucx": package_version("ucx-utils"),
                     "rdma-core": package_version("rdma-core")},
        "ucx_transport_checks": checks, "started": started_at, "aborted": aborted,
        "minutes": round((time.monotonic() - started) / 60, 2), "runs": runs,
    }
    with open(opts.out, "w") as f:
        json.dump(raw, f, indent=1)
    if aborted:
        say(f"stopped: {aborted}")
        return 1
    retried = sum(1 for r in runs if r["errors"])
    say(f"{len(runs)} runs in {raw['minutes']:.1f} minutes ({retried} needed more than one attempt)")
    return 0
