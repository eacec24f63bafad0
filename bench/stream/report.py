#!/usr/bin/env python3
"""bench/stream/run's report: cordma::stream beside rsocket (rstream) and TCP.

Reads the inside half's raw.jsonl (one line per measurement: a fresh server
and client pair running rstream's custom test, tagged with its round) and
meta.json; writes NAME.json (everything, and the summary), NAME.md (the
tables) and NAME.png (gnuplot: latency and bandwidth against size).

Each measurement gives the client's usec/xfer (rstream's figure: elapsed
time / iterations / (2 * transfers)). Latency is that figure for a ping-pong
(-C 1): half a round trip. Bandwidth is size / usec/xfer for a burst each
way (-I 1), in MB/s (10^6 bytes). A figure here is the median over the
rounds, with the lowest and highest in brackets; ratios are cordma's median
over rsocket's (and TCP's): in a TCG VM absolute figures drift with the
host's load, and only figures measured close together (the rounds
interleave the three, measurement by measurement) compare.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from report_format import fmt, human, short  # noqa: E402

IMPLS = [("cordma", "cordma::stream"), ("rsocket", "rsocket (rstream)"), ("tcp", "TCP (rstream -T s)")]
MODES = {
    "spin": {"cordma": "polling_mode::busy", "rsocket": "nonblocking calls, spinning on EAGAIN (rstream's default)",
             "tcp": "nonblocking calls, spinning on EAGAIN (-T s)"},
    "block": {"cordma": "polling_mode::event", "rsocket": "blocking calls (-T b)", "tcp": "blocking calls (-T s -T b)"},
}





def load(raw_path):
    recs = []
    with open(raw_path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"report.py: skipping a line that is not JSON: {line[:120]}", file=sys.stderr)
    return recs


def metric(rec):
    """Latency: usec/xfer; bandwidth: MB/s."""
    if rec["rc"] != 0 or not rec.get("usec_per_xfer"):
        return None
    return rec["usec_per_xfer"] if rec["test"] == "lat" else rec["mb_per_s"]


def checks(recs):
    """The untimed runs with every byte verified: {impl: (passed, [failed sizes])}."""
    out = {}
    for r in recs:
        if r["test"] != "verify":
            continue
        ok, bad = out.get(r["impl"], (0, []))
        if r["rc"] == 0:
            ok += 1
        else:
            bad = bad + [human(r["bytes"])]
        out[r["impl"]] = (ok, bad)
    return out


def aggregate(recs):
    """{(impl, test, bytes): {median, min, max, values}}"""
    cells = {}
    for r in recs:
        v = metric(r)
        if v is not None:
            cells.setdefault((r["impl"], r["test"], r["bytes"]), []).append(v)
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "values": v} for k, v in cells.items()}


def per_round(recs, test, size, a="cordma", b="rsocket"):
    """a's figure over b's, round by round (measured next to each other, so
    drift in the host's load, which moves both, cancels more than in a
    ratio of medians): latency a/b, bandwidth likewise a/b (MB/s)."""
    by = {}
    for r in recs:
        v = metric(r)
        if v is not None and r["test"] == test and r["bytes"] == size:
            by.setdefault(r["round"], {})[r["impl"]] = v
    return [by[k][a] / by[k][b] for k in sorted(by) if a in by[k] and b in by[k] and by[k][b]]


def cell(s, digits=1):
    if s is None:
        return "–"
    if len(s["values"]) == 1:
        return fmt(s["median"], digits)
    return f"{fmt(s['median'], digits)} ({fmt(s['min'], digits)}–{fmt(s['max'], digits)})"


def ratio(a, b):
    if a is None or b is None or not b["median"]:
        return None
    return a["median"] / b["median"]


def failures(recs):
    bad = [r for r in recs if r["rc"] != 0]
    out = []
    for r in bad:
        why = "timed out" if r["rc"] in (124, 137) else ("no result line" if r["rc"] == -1 else f"status {r['rc']}")
        last = next((l for l in reversed(r.get("output_tail", [])) if l.strip()), "")
        out.append(f"round {r['round']} {r['impl']} {r['test']} {human(r['bytes'])}: {why}"
                   + (f" (`{last.strip()[:160]}`)" if last else ""))
    return out


def host_load(path):
    """The host's 5-s samples of other work while measuring (host_load.py)."""
    if not path or not os.path.exists(path):
        return None
    samples = []
    for line in open(path):
        f = line.split()
        try:
            samples.append((int(f[0]), float(f[1]), int(f[2])))
        except (ValueError, IndexError):
            continue
    if not samples:
        return None
    cores = [c for _, c, _ in samples]
    return {"raw": samples, "samples": len(samples), "mean_cores_used_by_others": round(statistics.mean(cores), 2),
            "max_cores_used_by_others": round(max(cores), 2),
            "busy_samples": sum(1 for c in cores if c >= 0.2),
            "samples_with_other_vms": sum(1 for _, _, q in samples if q > 0)}


def plot(path, meta, agg):
    with tempfile.TemporaryDirectory() as tmp:
        def data(name, rows):
            p = os.path.join(tmp, name)
            with open(p, "w") as f:
                for row in rows:
                    f.write(" ".join(str(v) for v in row) + "\n")
            return p

        panels = []
        for test, sizes, ylabel, title in (
                ("lat", meta["lat_sizes"], "microseconds (half round trip)", "latency: ping-pong, usec/xfer"),
                ("bw", meta["bw_sizes"], "MB/s (10^6 bytes)", "bandwidth: a burst each way")):
            lines = []
            for i, (impl, label) in enumerate(IMPLS):
                rows = [(s, c["median"], c["min"], c["max"]) for s in sizes for c in [agg.get((impl, test, s))] if c]
                if rows:
                    lines.append(f"'{data(f'{test}-{impl}', rows)}' using 1:2:3:4 with yerrorlines lw 2 "
                                 f"pt {(5, 7, 9)[i]} lc {(1, 2, 3)[i]} title \"{label}\"")
            if lines:
                xtics = ", ".join(f'"{short(s)}" {s}' for s in sizes)
                panels.append((test, sizes, ylabel, title, xtics, lines))
        if not panels:
            return False
        where = "Soft-RoCE in tools/rxe-vm" if meta.get("in_rxe_vm") else "the host's device"
        script = [f'set terminal pngcairo size {560 * len(panels)},460 font "sans,10"',
                  f"set output '{path}'",
                  f'set multiplot layout 1,{len(panels)} title "cordma::stream vs rsocket vs TCP on {meta["device"]} '
                  f'({where}), {meta["mode"]} mode; median of {meta["rounds"]} rounds, bars: min-max"',
                  "set grid", "set key top left"]
        for test, sizes, ylabel, title, xtics, lines in panels:
            script += ["unset logscale", "set logscale x" + ("y" if test == "lat" else ""),
                       f"set xtics ({xtics})", f"set xrange [{sizes[0] / 1.5}:{sizes[-1] * 1.5}]",
                       "set yrange [0:*]" if test == "bw" else "set yrange [*:*]",
                       "set xlabel 'bytes per transfer'", f"set ylabel '{ylabel}'", f"set title '{title}'",
                       "plot " + ", \\\n     ".join(lines)]
        script.append("unset multiplot")
        sp = os.path.join(tmp, "plot.gp")
        with open(sp, "w") as f:
            f.write("\n".join(script) + "\n")
        done = subprocess.run(["gnuplot", sp], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"report.py: gnuplot failed:\n{done.stderr}\n{open(sp).read()}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--raw", required=True, help="raw.jsonl from `run --inside`")
    parser.add_argument("--meta", required=True, help="meta.json from `run --inside`")
    parser.add_argument("--host-load", help="host_load.py's samples: other work on the host while measuring")
    parser.add_argument("--out", required=True, help="path without extension: writes .json, .md, .png")
    opts = parser.parse_args()

    meta = json.load(open(opts.meta))
    everything = load(opts.raw)
    recs = [r for r in everything if r["test"] != "verify"]
    verified = checks(everything)
    agg = aggregate(recs)
    name = os.path.basename(opts.out)
    mode = MODES[meta["mode"]]

    tables = {}
    goals = {}
    for test in ("lat", "bw"):
        rows = []
        for s in meta[f"{test}_sizes"]:
            c, r, t = (agg.get((impl, test, s)) for impl, _ in IMPLS)
            if not any((c, r, t)):
                continue
            shape = next((x for x in recs if x["test"] == test and x["bytes"] == s), {})
            rows.append({"bytes": s, "cordma": c and c["median"], "rsocket": r and r["median"], "tcp": t and t["median"],
                         "cordma_over_rsocket": ratio(c, r), "cordma_over_tcp": ratio(c, t),
                         "cordma_over_rsocket_per_round": [round(x, 3) for x in per_round(recs, test, s)],
                         "xfers": shape.get("xfers"), "iters": shape.get("iters"), "_cells": (c, r, t)})
        tables[test] = rows
        rs = [row["cordma_over_rsocket"] for row in rows]
        if rs and all(x is not None for x in rs):
            goals[test] = all(x <= 1.0 for x in rs) if test == "lat" else all(x >= 1.0 for x in rs)
        else:
            goals[test] = None

    png = opts.out + ".png"
    drew = plot(png, meta, agg)

    method = ("rstream's custom test, the same in all three: after an untimed 16-byte exchange the client sends "
              "`xfers` transfers of `size` bytes and then receives as many back, `iters` times; the server does "
              "the reverse. Latency is a ping-pong (-C 1 -I N): usec/xfer = elapsed / iters / 2, half a round trip. "
              "Bandwidth is a burst each way (-I 1 -C N): size / usec/xfer, MB/s of 10^6 bytes. Each measurement is "
              "a fresh server and client pair, the client's figure is taken; figures are medians over the rounds "
              "(min-max in brackets), the three programs interleaved measurement by measurement, their order rotated "
              "between rounds. Ratios are cordma's median over rsocket's (TCP's); 'per round' is cordma's figure over "
              "rsocket's measured next to it in each round.")
    fails = failures(recs)
    others = host_load(opts.host_load)
    if others is not None:
        # Each measurement's share: the samples that cover it (the guest's
        # clock, from which "started" comes, follows the host's).
        busy_recs = 0
        for r in everything:
            if "started" not in r:
                continue
            t0, t1 = r["started"], r["started"] + r["seconds"] + 5
            near = [c for t, c, _ in others["raw"] if t0 <= t <= t1]
            r["host_cores_used_by_others"] = round(statistics.mean(near), 2) if near else None
            busy_recs += bool(near) and statistics.mean(near) >= 0.2 and r["test"] != "verify"
        others["busy_measurements"] = busy_recs
    summary = {"name": name, **meta, "method": method, "how": mode,
               "goals": {"latency_at_most_1x_rsocket": goals["lat"], "bandwidth_at_least_1x_rsocket": goals["bw"]},
               "tables": {k: [{kk: vv for kk, vv in row.items() if not kk.startswith("_")} for row in v]
                          for k, v in tables.items()},
               "failures": fails, "host_load": {k: v for k, v in (others or {}).items() if k != "raw"},
               "verified": {impl: {"passed": ok, "failed_sizes": bad} for impl, (ok, bad) in verified.items()},
               "measurements": everything}
    with open(opts.out + ".json", "w") as f:
        json.dump(summary, f, indent=1)

    where = "Soft-RoCE inside tools/rxe-vm" if meta.get("in_rxe_vm") else "the host's RDMA device"
    ok = len([r for r in recs if r["rc"] == 0])
    md = [f"# cordma::stream vs rsocket vs TCP: {name}", "",
          f"Measured {meta['started']} on {meta['device']} ({meta['address']}; {where}; {meta['cpus']} CPUs; "
          f"kernel {meta['kernel']}; rdmacm-utils {meta['rdmacm_utils']}), {meta['rounds']} rounds, "
          f"{meta['minutes']:.2f} minutes of measuring, {ok} of {len(recs)} measurements succeeded. Produced by "
          f"`bench/stream/run{' --mode block' if meta['mode'] == 'block' else ''}`; every measurement and command line "
          f"is in `{name}.json`.", "",
          method, "",
          f"Mode `{meta['mode']}`: cordma with {mode['cordma']}; rsocket with {mode['rsocket']}; TCP with {mode['tcp']}. "
          "cordma's program is `build/bench/cordma_stream_bench` (bench/stream/cordma_stream_bench.cpp): "
          "stream::serve/accept and stream::connect, write and read_exactly from one heap buffer, as rstream "
          "does with rsend/rrecv; stream_options at their defaults.", ""]
    if verified:
        md += ["Checked first, untimed: " + "; ".join(
            f"{label} " + (f"{ok} of {ok + len(bad)} runs with every byte right" + (f", wrong or failed at {', '.join(bad)}" if bad else ""))
            for impl, label in IMPLS if impl in verified for ok, bad in [verified[impl]])
            + " (4 transfers each way, twice, of 64 B, 64 KiB and 1 MiB; cordma_stream_bench --verify, rstream -T v).", ""]
    if others is not None:
        md += [f"Other work on the host while measuring ({others['samples']} samples, every 5 s): "
               f"{others['mean_cores_used_by_others']:.2f} cores on average, at most "
               f"{others['max_cores_used_by_others']:.2f}, at least 0.2 cores in {others['busy_samples']} samples; "
               f"another VM in {others['samples_with_other_vms']}; "
               f"{others['busy_measurements']} of {len(recs)} measurements ran while others used 0.2 cores or more."
               + (" The host was not quiet: figures measured then are slower and noisier." if others["busy_samples"] else
                  " The host was otherwise quiet."), ""]
    if fails:
        md += ["Failed measurements (left out of the figures):", ""] + [f"- {f}" for f in fails] + [""]
    pk = {}
    for r in recs:
        if r["rc"] == 0 and r["test"] == "lat":
            pk.setdefault((r["impl"], r["bytes"]), []).append(r["device_sent_pkts"] / (2 * r["iters"] * r["xfers"]))
    if pk:
        per = "; ".join(f"{label} " + ", ".join(f"{human(s)} {statistics.median(pk[(impl, s)]):.1f}"
                                                    for s in meta["lat_sizes"] if (impl, s) in pk)
                        for impl, label in IMPLS if any(k[0] == impl for k in pk))
        md += [f"Packets sent on {meta['device']} per transfer in the latency test (its hw counter `sent_pkts`; "
               f"TCP's never touch the device): {per}.", ""]
    labels = "| size | cordma | rsocket | TCP | cordma / rsocket | per round | cordma / TCP | xfers x iters |"
    md += ["## Latency (µs per transfer, half a round trip; lower is better)", "",
           labels, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in tables["lat"]:
        c, r, t = row["_cells"]
        md.append(f"| {human(row['bytes'])} | {cell(c)} | {cell(r)} | {cell(t)} | {fmt(row['cordma_over_rsocket'], 2)} | "
                  f"{', '.join(f'{x:.2f}' for x in row['cordma_over_rsocket_per_round']) or '–'} | "
                  f"{fmt(row['cordma_over_tcp'], 2)} | {row['xfers']} x {row['iters']} |")
    md += ["", "## Bandwidth (MB/s, each way in turn; higher is better)", "",
           labels, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in tables["bw"]:
        c, r, t = row["_cells"]
        md.append(f"| {human(row['bytes'])} | {cell(c)} | {cell(r)} | {cell(t)} | {fmt(row['cordma_over_rsocket'], 2)} | "
                  f"{', '.join(f'{x:.2f}' for x in row['cordma_over_rsocket_per_round']) or '–'} | "
                  f"{fmt(row['cordma_over_tcp'], 2)} | {row['xfers']} x {row['iters']} |")

    def verdict(g):
        return "not measured" if g is None else ("met" if g else "not met")
    md += ["", f"Goal: latency at most 1.0x rsocket's at every size: {verdict(goals['lat'])}; bandwidth at least "
           f"1.0x rsocket's at every size: {verdict(goals['bw'])}.", ""]
    if drew:
        md += [f"![latency and bandwidth against size]({name}.png)", ""]
    with open(opts.out + ".md", "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    main()
