#!/usr/bin/env python3
"""bench/compare's two halves.

measure: runs on the machine with the RDMA device (inside tools/rxe-vm when
    the host has none). For every repetition, for every test and size, runs
    perftest's server and client and cordma-perf with matching parameters,
    back to back (the order alternates between repetitions), and writes every
    parsed result to one JSON file.
report: runs on the host. Takes the medians over the repetitions, their
    ratios, and writes NAME.json, NAME.md and NAME.png (gnuplot).

Why the pairing matters: in a TCG VM absolute times drift with the host's
load, so only figures measured close together compare. Ratios are taken
between medians of the same repetitions.
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_format import human  # noqa: E402

# What is measured. Each group is one test at one size; its runs follow each
# other directly. `compare_to` names the perftest run a cordma run is
# judged against.
QUEUE_DEPTH = 64  # outstanding operations in bandwidth runs, both tools


def latency_iterations(size):
    return max(20, min(1000, (16 << 20) // size))


def bandwidth_iterations(size):
    return max(128, min(10000, (32 << 20) // size))


def plan(sizes):
    groups = []
    for size in sizes:
        n = latency_iterations(size)
        groups.append({
            "group": "write_lat", "bytes": size, "runs": [
                {"tool": "perftest", "label": "ib_write_lat", "args": ["ib_write_lat", "-s", str(size), "-n", str(n)]},
                {"tool": "cordma", "label": "cordma write", "compare_to": "ib_write_lat",
                 "args": ["--op", "write", "--test", "lat", "--size", str(size), "--iterations", str(n)]},
                {"tool": "cordma", "label": "cordma write_imm ping-pong", "compare_to": "ib_write_lat",
                 "args": ["--op", "write_imm", "--test", "lat", "--size", str(size), "--iterations", str(n)]},
            ]})
    for size in sizes:
        n = bandwidth_iterations(size)
        groups.append({
            "group": "write_bw", "bytes": size, "runs": [
                {"tool": "perftest", "label": "ib_write_bw",
                 "args": ["ib_write_bw", "-s", str(size), "-n", str(n), "-t", str(QUEUE_DEPTH)]},
                {"tool": "cordma", "label": "cordma write", "compare_to": "ib_write_bw",
                 "args": ["--op", "write", "--test", "bw", "--size", str(size), "--iterations", str(n),
                          "--depth", str(QUEUE_DEPTH)]},
            ]})
    # Diagnostic: perftest signalling every work request, as cordma must
    # (each operation's coroutine is resumed by its own completion). By
    # default ib_write_bw asks for a completion only every cq_mod requests.
    small = [s for s in sizes if s <= 4096]
    diag = 64 if 64 in sizes else (small[-1] if small else None)
    if diag is not None:
        n = bandwidth_iterations(diag)
        groups.append({
            "group": "write_bw_every_completion", "bytes": diag, "runs": [
                {"tool": "perftest", "label": "ib_write_bw -Q 1",
                 "args": ["ib_write_bw", "-s", str(diag), "-n", str(n), "-t", str(QUEUE_DEPTH), "-Q", "1"]},
            ]})
    return groups


# ---------------------------------------------------------------------------
# measure

def roce_v2_ipv4_gid_index(device, port=1):
    """The GID index perftest needs (-x): RoCE v2 with an IPv4-mapped address."""
    base = f"/sys/class/infiniband/{device}/ports/{port}"
    for path in sorted(glob.glob(f"{base}/gids/*"), key=lambda p: int(os.path.basename(p))):
        index = os.path.basename(path)
        try:
            gid = open(path).read().strip()
            kind = open(f"{base}/gid_attrs/types/{index}").read().strip()
        except OSError:
            continue
        if kind.lower() == "roce v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return int(index)
    return None


def port_listening(port):
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return any(line.split()[3].endswith(f":{port}") for line in out.splitlines() if len(line.split()) > 3)


def parse_perftest(text, latency):
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes") and i + 1 < len(lines):
            fields = lines[i + 1].split()
            try:
                values = [float(f) for f in fields]
            except ValueError:
                break
            if latency and len(values) >= 9:
                keys = ["bytes", "iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p99_9"]
                key = "t_typical"
            elif not latency and len(values) >= 5:
                keys = ["bytes", "iterations", "bw_peak_mb_per_s", "bw_avg_mb_per_s", "msg_rate_mpps"]
                key = "bw_avg_mb_per_s"
            else:
                break
            result = dict(zip(keys, values))
            # perftest times with the TSC and calibrates its rate first; under
            # a loaded VM that fails now and then ("Correlation coefficient
            # r^2 < 0.9") and every figure comes out inf: worth a retry.
            if not math.isfinite(result[key]):
                raise RuntimeError("perftest's figures are not finite (its clock calibration failed):\n" +
                                   "\n".join(lines[max(0, i - 3):i + 2]))
            return {k: (v if math.isfinite(v) else None) for k, v in result.items()}
    raise RuntimeError("no result table in perftest's output:\n" + text[-2000:])


def run_perftest(args, device, address, gid, port, timeout):
    common = ["-d", device, "-x", str(gid), "-F", "-p", str(port)]
    server = subprocess.Popen(args + common, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while not port_listening(port):
            if server.poll() is not None:
                raise RuntimeError(f"{args[0]} server exited early:\n{server.stdout.read()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} server did not listen on port {port} within 20 s")
            time.sleep(0.05)
        client = subprocess.run(args + common + [address], capture_output=True, text=True, timeout=timeout)
        if client.returncode != 0:
            raise RuntimeError(f"{args[0]} client exited with {client.returncode}:\n{client.stdout}{client.stderr}")
        server.wait(timeout=30)
        return parse_perftest(client.stdout, latency=args[0].endswith("_lat")), client.stdout
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def run_cordma(perf, args, device, timeout):
    # --loopback: both ends in one process, as this comparison was made
    # (cordma-perf without it is a server, with a HOST a client).
    cmd = [perf, "--loopback"] + args + ["--device", device, "--json", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"cordma-perf exited with {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout), None


def minutes(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def summary_of(run, result):
    if run["tool"] == "perftest":
        if "t_typical" in result:
            return f"p50 {result['t_typical']:.2f} us"
        return f"{result['bw_avg_mb_per_s']:.2f} MB/s, {result['msg_rate_mpps'] * 1e6:.0f} msg/s"
    r = result["results"][0]
    if "latency_us" in r:
        return f"p50 {r['latency_us']['p50']:.2f} us ({result['latency_basis']})"
    return f"{r['mb_per_s']:.2f} MB/s, {r['mmsg_per_s'] * 1e6:.0f} msg/s"


def measure(opts):
    device = os.environ.get("CORDMA_TEST_DEVICE") or os.environ.get("RXE_VM_DEVICE")
    address = os.environ.get("CORDMA_TEST_ADDR") or os.environ.get("RXE_VM_ADDR")
    if not device or not address:
        sys.exit("compare.py measure: CORDMA_TEST_DEVICE and CORDMA_TEST_ADDR must name the RDMA device and an "
                 "IPv4 address on it (bench/compare sets them through tools/lib/with-device)")
    gid = roce_v2_ipv4_gid_index(device)
    if gid is None:
        sys.exit(f"compare.py measure: {device} port 1 has no RoCE v2 IPv4 GID; perftest needs one (-x)")
    sizes = [int(s) for s in opts.sizes.split(",")]
    groups = plan(sizes)
    total = opts.reps * sum(len(g["runs"]) for g in groups)
    print(f"compare: {device} ({address}, GID index {gid}), {len(sizes)} sizes, {opts.reps} repetitions, "
          f"{total} runs", file=sys.stderr, flush=True)

    runs = []
    durations = {}
    started = time.monotonic()
    done_count = 0
    port = 18515
    for rep in range(1, opts.reps + 1):
        for g in groups:
            order = g["runs"] if rep % 2 == 1 else list(reversed(g["runs"]))
            for run in order:
                done_count += 1
                key = (g["group"], g["bytes"], run["label"])
                record = {"rep": rep, "group": g["group"], "bytes": g["bytes"], "tool": run["tool"],
                          "label": run["label"], "compare_to": run.get("compare_to"), "result": None,
                          "error": None}
                t0 = time.monotonic()
                for attempt in (1, 2, 3):
                    port = 18515 + (port - 18515 + 1) % 200
                    try:
                        if run["tool"] == "perftest":
                            record["cmd"] = run["args"] + ["-d", device, "-x", str(gid), "-F", "-p", str(port)]
                            record["result"], _ = run_perftest(run["args"], device, address, gid, port,
                                                               opts.timeout)
                        else:
                            record["cmd"] = ["cordma-perf", "--loopback"] + run["args"] + ["--device", device, "--json"]
                            record["result"], _ = run_cordma(opts.cordma_perf, run["args"], device, opts.timeout)
                        record["error"] = None
                        break
                    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                        record["error"] = str(e)
                        print(f"compare: {run['label']} {g['bytes']} B failed (attempt {attempt}): {e}",
                              file=sys.stderr, flush=True)
                record["seconds"] = round(time.monotonic() - t0, 3)
                durations.setdefault(key, []).append(record["seconds"])
                runs.append(record)
                elapsed = time.monotonic() - started
                # Left: the runs still to come, each as long as it took last time.
                left = 0.0
                for r2 in range(rep, opts.reps + 1):
                    for g2 in groups:
                        for run2 in g2["runs"]:
                            k2 = (g2["group"], g2["bytes"], run2["label"])
                            if r2 == rep and k2 in durations and len(durations[k2]) >= rep:
                                continue
                            seen = durations.get(k2)
                            left += statistics.mean(seen) if seen else elapsed / done_count
                what = summary_of(run, record["result"]) if record["result"] else "FAILED"
                print(f"compare: [{done_count}/{total}] rep {rep}/{opts.reps} {run['label']:<27} "
                      f"{g['bytes']:>8} B: {what:<34} {record['seconds']:5.1f} s  "
                      f"(elapsed {minutes(elapsed)}, about {minutes(left)} left)", file=sys.stderr, flush=True)

    raw = {
        "device": device, "address": address, "gid_index": gid, "reps": opts.reps, "sizes": sizes,
        "queue_depth": QUEUE_DEPTH, "kernel": platform.release(), "hostname": socket.gethostname(),
        "in_rxe_vm": bool(os.environ.get("RXE_VM")),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "minutes": round((time.monotonic() - started) / 60, 2), "runs": runs,
    }
    with open(opts.out, "w") as f:
        json.dump(raw, f, indent=1)
    failed = [r for r in runs if r["error"]]
    print(f"compare: {len(runs) - len(failed)} runs ok, {len(failed)} failed, in {minutes(time.monotonic() - started)}",
          file=sys.stderr, flush=True)
    return 1 if len(failed) == len(runs) else 0


# ---------------------------------------------------------------------------
# report

def metrics_of(record):
    """The figures one run gives, under names common to both tools."""
    r = record["result"]
    if r is None:
        return None
    if record["tool"] == "perftest":
        if "t_typical" in r:
            return {"p50_us": r["t_typical"], "p99_us": r["p99"], "p99_9_us": r["p99_9"], "max_us": r["t_max"]}
        return {"mb_per_s": r["bw_avg_mb_per_s"], "mmsg_per_s": r["msg_rate_mpps"]}
    x = r["results"][0]
    if "latency_us" in x:
        lat = x["latency_us"]
        return {"p50_us": lat["p50"], "p99_us": lat["p99"], "p99_9_us": lat["p99_9"], "max_us": lat["max"],
                "basis": r["latency_basis"]}
    return {"mb_per_s": x["mb_per_s"], "mmsg_per_s": x["mmsg_per_s"], "cpu_us_per_op": x["cpu_us_per_op"]}


def aggregate(raw):
    """{(group, bytes, label): {metric: {"median", "min", "max", "values"}}}"""
    table = {}
    for record in raw["runs"]:
        m = metrics_of(record)
        if m is None:
            continue
        cell = table.setdefault((record["group"], record["bytes"], record["label"]), {})
        for k, v in m.items():
            if isinstance(v, (int, float)) and v is not None:
                cell.setdefault(k, []).append(v)
    out = {}
    for key, cell in table.items():
        out[key] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "values": v}
                    for k, v in cell.items()}
    return out


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def cell(stats, metric, digits=2):
    if stats is None or metric not in stats:
        return "–"
    s = stats[metric]
    if len(s["values"]) == 1:
        return fmt(s["median"], digits)
    return f"{fmt(s['median'], digits)} ({fmt(s['min'], digits)}–{fmt(s['max'], digits)})"



def med(agg, key, metric):
    s = agg.get(key)
    return s[metric]["median"] if s and metric in s else None


def report(opts):
    raw = json.load(open(opts.raw))
    overhead = json.load(open(opts.overhead)) if opts.overhead and os.path.exists(opts.overhead) else None
    agg = aggregate(raw)
    sizes = raw["sizes"]
    name = os.path.basename(opts.out)
    reps = raw["reps"]

    rows_lat, rows_bw = [], []
    for s in sizes:
        pt = med(agg, ("write_lat", s, "ib_write_lat"), "p50_us")
        cw = med(agg, ("write_lat", s, "cordma write"), "p50_us")
        ci = med(agg, ("write_lat", s, "cordma write_imm ping-pong"), "p50_us")
        pt99 = med(agg, ("write_lat", s, "ib_write_lat"), "p99_us")
        cw99 = med(agg, ("write_lat", s, "cordma write"), "p99_us")
        rows_lat.append({"bytes": s, "ib_write_lat_p50_us": pt, "cordma_write_p50_us": cw,
                         "ratio_write": ratio(cw, pt), "cordma_write_imm_pingpong_p50_us": ci,
                         "ratio_write_imm": ratio(ci, pt), "ib_write_lat_p99_us": pt99,
                         "cordma_write_p99_us": cw99, "ratio_p99": ratio(cw99, pt99)})
        pb = med(agg, ("write_bw", s, "ib_write_bw"), "mb_per_s")
        cb = med(agg, ("write_bw", s, "cordma write"), "mb_per_s")
        pm = med(agg, ("write_bw", s, "ib_write_bw"), "mmsg_per_s")
        cm = med(agg, ("write_bw", s, "cordma write"), "mmsg_per_s")
        rows_bw.append({"bytes": s, "ib_write_bw_mb_per_s": pb, "cordma_write_mb_per_s": cb,
                        "ratio": ratio(cb, pb), "ib_write_bw_mmsg_per_s": pm, "cordma_write_mmsg_per_s": cm,
                        "cordma_cpu_us_per_op": med(agg, ("write_bw", s, "cordma write"), "cpu_us_per_op")})

    # The goals of the benchmark issue.
    def worst(rows, key, pick, filt):
        vals = [(r[key], r["bytes"]) for r in rows if filt(r["bytes"]) and r[key] is not None]
        return pick(vals) if vals else (None, None)

    lat_worst, lat_at = worst(rows_lat, "ratio_write", max, lambda b: 8 <= b <= 4096)
    bw_worst, bw_at = worst(rows_bw, "ratio", min, lambda b: b >= 65536)
    rate = next((r for r in rows_bw if r["bytes"] == 64), None)
    rate_ratio = ratio(rate["cordma_write_mmsg_per_s"], rate["ib_write_bw_mmsg_per_s"]) if rate else None
    slot = None
    if overhead:
        slot = max((m for m in overhead["results"] if m["variant"] == "task+slot"), key=lambda m: m["ns_per_op"],
                   default=None)
    goals = [
        {"goal": "write latency p50, 8 B–4 KiB, within 1.10x of ib_write_lat", "target": 1.10, "measured": lat_worst,
         "where": f"worst at {human(lat_at)}" if lat_at else "", "met": lat_worst is not None and lat_worst <= 1.10},
        {"goal": "write bandwidth, 64 KiB and up, at least 0.95x of ib_write_bw", "target": 0.95, "measured": bw_worst,
         "where": f"worst at {human(bw_at)}" if bw_at else "", "met": bw_worst is not None and bw_worst >= 0.95},
        {"goal": f"64 B write message rate at depth {QUEUE_DEPTH}, at least 0.85x of ib_write_bw -s 64",
         "target": 0.85, "measured": rate_ratio, "where": "", "met": rate_ratio is not None and rate_ratio >= 0.85},
    ]
    if slot:
        goals.append({"goal": "coroutine machinery under 50 ns per operation, 0 allocations", "target": 50,
                      "measured": slot["ns_per_op"],
                      "where": f"{slot['allocations_per_op']:.2f} allocations/op, depth {slot['depth']}",
                      "met": slot["ns_per_op"] < 50 and slot["allocations_per_op"] == 0})

    diag = None
    for (group, b, label), stats in agg.items():
        if group == "write_bw_every_completion":
            default = med(agg, ("write_bw", b, "ib_write_bw"), "mmsg_per_s")
            mine = med(agg, ("write_bw", b, "cordma write"), "mmsg_per_s")
            every = stats["mmsg_per_s"]["median"]
            diag = {"bytes": b, "ib_write_bw_mmsg_per_s": default, "ib_write_bw_every_completion_mmsg_per_s": every,
                    "cordma_mmsg_per_s": mine, "every_completion_vs_default": ratio(every, default),
                    "cordma_vs_every_completion": ratio(mine, every)}

    result = {
        "name": name, "device": raw["device"], "where": opts.where, "kernel": raw["kernel"],
        "started": raw["started"], "minutes": raw["minutes"], "reps": reps, "sizes": sizes,
        "queue_depth": raw["queue_depth"],
        "method": ("perftest and cordma-perf run back to back for each test and size, the order alternating "
                   "between repetitions; figures are medians over the repetitions, ratios are cordma/perftest "
                   "of those medians. Latency is half round trip (perftest's RTT/2 convention); cordma write = "
                   "one write's post-to-completion time halved; cordma write_imm ping-pong = a ping-pong of "
                   "write_with_imm answered on receive completion, halved. MB = 2^20 bytes."),
        "goals": goals, "latency": rows_lat, "bandwidth": rows_bw, "every_completion_diagnostic": diag,
        "coroutine_overhead": overhead, "runs": raw["runs"],
    }
    with open(opts.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    write_markdown(opts.out + ".md", result, agg)
    plot(opts.out + ".png", result, agg)
    return 0


def write_markdown(path, r, agg):
    L = []
    L.append(f"# cordma vs perftest: {r['name']}")
    L.append("")
    L.append(f"Measured {r['started']} on {r['where']} (kernel {r['kernel']}), {r['reps']} repetitions, "
             f"{r['minutes']} minutes. Produced by `bench/compare`; every run is in `{r['name']}.json`.")
    L.append("")
    L.append("perftest and cordma-perf ran back to back for each test and size, alternating which went first; "
             "each figure is the median over the repetitions, with the lowest and highest in brackets; a ratio "
             "is cordma's median over perftest's. On Soft-RoCE in a TCG VM absolute times are several times "
             "native and drift with the host's load; the ratios are what to read.")
    L.append("")
    L.append("## Goals")
    L.append("")
    L.append("| goal | measured | met |")
    L.append("| --- | --- | --- |")
    for g in r["goals"]:
        unit = " ns/op" if g["target"] == 50 else "x"
        L.append(f"| {g['goal']} | {fmt(g['measured'])}{unit} {('(' + g['where'] + ')') if g['where'] else ''} | "
                 f"{'yes' if g['met'] else '**no**'} |")
    L.append("")
    L.append("## Write latency, half round trip (µs)")
    L.append("")
    L.append("`ib_write_lat` is a ping-pong (each side writes to the other and polls memory) and reports "
             "RTT/2. *cordma write* is one `co_await conn.write(...)` from post to the coroutine's resumption "
             "(the write and its ACK: two trips through the fabric, like the ping-pong's two writes), halved. "
             "*cordma write_imm ping-pong* is the ping-pong done the cordma way: each side answers with "
             "`write_with_imm` when its `receive_write_imm` completes, RTT/2; it moves the message both ways, "
             "as ib_write_lat does, so it is the comparable one for large messages, where *cordma write* moves "
             "the data only once. cordma: busy polling, one listener thread serving both sides.")
    L.append("")
    L.append("| size | ib_write_lat p50 | cordma write p50 | ratio | cordma write_imm ping-pong p50 | ratio | "
             "ib_write_lat p99 | cordma write p99 | ratio |")
    L.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in r["latency"]:
        b = row["bytes"]
        L.append(f"| {human(b)} | {cell(agg.get(('write_lat', b, 'ib_write_lat')), 'p50_us')} | "
                 f"{cell(agg.get(('write_lat', b, 'cordma write')), 'p50_us')} | {fmt(row['ratio_write'])} | "
                 f"{cell(agg.get(('write_lat', b, 'cordma write_imm ping-pong')), 'p50_us')} | "
                 f"{fmt(row['ratio_write_imm'])} | "
                 f"{cell(agg.get(('write_lat', b, 'ib_write_lat')), 'p99_us')} | "
                 f"{cell(agg.get(('write_lat', b, 'cordma write')), 'p99_us')} | {fmt(row['ratio_p99'])} |")
    L.append("")
    L.append(f"## Write bandwidth, {r['queue_depth']} outstanding (MB/s of 2^20 bytes)")
    L.append("")
    L.append(f"`ib_write_bw -t {r['queue_depth']}` against `cordma-perf --test bw --depth {r['queue_depth']}` "
             f"({r['queue_depth']} coroutines, each looping on `co_await conn.write(...)`). CPU is cordma-perf's "
             "process CPU time per operation (busy polling keeps one core at 100%).")
    L.append("")
    L.append("| size | ib_write_bw MB/s | cordma MB/s | ratio | ib_write_bw msg/s | cordma msg/s | ratio | "
             "cordma CPU µs/op |")
    L.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in r["bandwidth"]:
        b = row["bytes"]
        pm, cm = row["ib_write_bw_mmsg_per_s"], row["cordma_write_mmsg_per_s"]
        L.append(f"| {human(b)} | {cell(agg.get(('write_bw', b, 'ib_write_bw')), 'mb_per_s')} | "
                 f"{cell(agg.get(('write_bw', b, 'cordma write')), 'mb_per_s')} | {fmt(row['ratio'])} | "
                 f"{fmt(pm * 1e6 if pm else None, 0)} | {fmt(cm * 1e6 if cm else None, 0)} | "
                 f"{fmt(ratio(cm, pm))} | {fmt(row['cordma_cpu_us_per_op'], 1)} |")
    L.append("")
    d = r["every_completion_diagnostic"]
    if d:
        L.append("## Diagnostic: a completion for every write")
        L.append("")
        L.append(f"`ib_write_bw` by default asks for a completion only every few work requests (CQ moderation); "
                 f"cordma asks for one per operation, since each completion resumes its coroutine. "
                 f"`ib_write_bw -Q 1` asks for every one, as cordma does ({human(d['bytes'])}, msg/s):")
        L.append("")
        L.append("| ib_write_bw | ib_write_bw -Q 1 | ratio | cordma | cordma vs -Q 1 |")
        L.append("| ---: | ---: | ---: | ---: | ---: |")
        L.append(f"| {fmt(d['ib_write_bw_mmsg_per_s'] * 1e6 if d['ib_write_bw_mmsg_per_s'] else None, 0)} | "
                 f"{fmt(d['ib_write_bw_every_completion_mmsg_per_s'] * 1e6, 0)} | "
                 f"{fmt(d['every_completion_vs_default'])} | "
                 f"{fmt(d['cordma_mmsg_per_s'] * 1e6 if d['cordma_mmsg_per_s'] else None, 0)} | "
                 f"{fmt(d['cordma_vs_every_completion'])} |")
        L.append("")
    o = r["coroutine_overhead"]
    if o:
        L.append("## Coroutine machinery (natively, no device: `coroutine_overhead`)")
        L.append("")
        L.append("One operation = post to a fake CQ, drain it like `event_listener::drain`, dispatch through "
                 "`completion_target`. *task+slot* has cordma's shape (wr_id → work slot → awaiter → resume); "
                 "*task+slot+mr* adds the buffer's shared ownership as `connection::write` carries it.")
        L.append("")
        L.append("| variant | outstanding | ns/op | allocations/op | vs callback |")
        L.append("| --- | ---: | ---: | ---: | ---: |")
        for m in o["results"]:
            L.append(f"| {m['variant']} | {m['depth']} | {m['ns_per_op']:.1f} | {m['allocations_per_op']:.2f} | "
                     f"{m['vs_callback']:.2f}x |")
        L.append("")
    L.append("![latency and bandwidth vs message size](" + r["name"] + ".png)")
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def plot(path, r, agg):
    with tempfile.TemporaryDirectory() as tmp:
        def data(name, rows):
            p = os.path.join(tmp, name)
            with open(p, "w") as f:
                for row in rows:
                    if all(v is not None for v in row):
                        f.write(" ".join(str(v) for v in row) + "\n")
            return p

        def series(group, label, metric):
            out = []
            for s in r["sizes"]:
                st = agg.get((group, s, label))
                if st and metric in st:
                    out.append((s, st[metric]["median"], st[metric]["min"], st[metric]["max"]))
            return out

        lat_pt = data("lat_pt", series("write_lat", "ib_write_lat", "p50_us"))
        lat_cw = data("lat_cw", series("write_lat", "cordma write", "p50_us"))
        lat_ci = data("lat_ci", series("write_lat", "cordma write_imm ping-pong", "p50_us"))
        bw_pt = data("bw_pt", series("write_bw", "ib_write_bw", "mb_per_s"))
        bw_cw = data("bw_cw", series("write_bw", "cordma write", "mb_per_s"))
        xtics = ", ".join(f'"{human(s)}" {s}' for s in r["sizes"])
        script = f"""
set terminal pngcairo size 1400,560 font "sans,10"
set output '{path}'
set multiplot layout 1,2 title "cordma vs perftest on {r['device']} ({r['where'].split(';')[1].strip() if ';' in r['where'] else r['where']}); medians of {r['reps']}, bars: min-max"
set logscale xy
set grid
set key top left
set xlabel "message size (bytes)"
set xtics ({xtics})
set title "write latency p50, half round trip"
set ylabel "microseconds"
plot '{lat_pt}' using 1:2:3:4 with yerrorlines lw 2 pt 7 title "ib\\\\_write\\\\_lat", \\
     '{lat_cw}' using 1:2:3:4 with yerrorlines lw 2 pt 5 title "cordma write (post to completion, /2)", \\
     '{lat_ci}' using 1:2:3:4 with yerrorlines lw 2 pt 9 title "cordma write\\\\_imm ping-pong (RTT/2)"
set title "write bandwidth, {r['queue_depth']} outstanding"
set ylabel "MB/s (MiB per second, as perftest counts)"
set key bottom right
plot '{bw_pt}' using 1:2:3:4 with yerrorlines lw 2 pt 7 title "ib\\\\_write\\\\_bw", \\
     '{bw_cw}' using 1:2:3:4 with yerrorlines lw 2 pt 5 title "cordma write"
unset multiplot
"""
        sp = os.path.join(tmp, "plot.gp")
        with open(sp, "w") as f:
            f.write(script)
        done = subprocess.run(["gnuplot", sp], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"compare.py report: gnuplot failed:\n{done.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run perftest and cordma-perf (needs an RDMA device)")
    m.add_argument("--cordma-perf", required=True)
    m.add_argument("--sizes", default="8,64,512,4096,65536,1048576")
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--timeout", type=float, default=120, help="seconds per run")
    m.add_argument("--out", required=True)
    r = sub.add_parser("report", help="write NAME.json, NAME.md and NAME.png")
    r.add_argument("--raw", required=True)
    r.add_argument("--overhead")
    r.add_argument("--where", default="")
    r.add_argument("--out", required=True, help="path without extension")
    opts = parser.parse_args()
    return measure(opts) if opts.command == "measure" else report(opts)


if __name__ == "__main__":
    sys.exit(main())
