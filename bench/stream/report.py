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

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from module_report import (HOST_LOAD, arguments, cell, failures, failures_paragraph, host_load,  # noqa: E402
                           host_load_paragraph, host_load_summary, load, measured, plotting, public, ratio,
                           stats, where, write)
from report_format import fmt, human, short  # noqa: E402

IMPLS = [("cordma", "cordma::stream"), ("rsocket", "rsocket (rstream)"), ("tcp", "TCP (rstream -T s)")]
MODES = {
    "spin": {"cordma": "polling_mode::busy", "rsocket": "nonblocking calls, spinning on EAGAIN (rstream's default)",
             "tcp": "nonblocking calls, spinning on EAGAIN (-T s)"},
    "block": {"cordma": "polling_mode::event", "rsocket": "blocking calls (-T b)", "tcp": "blocking calls (-T s -T b)"},
}


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
    return {k: stats(v) for k, v in cells.items()}


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


def plot(path, meta, agg):
    with plotting() as gp:
        data = gp.data
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
        script = [f'set terminal pngcairo size {560 * len(panels)},460 font "sans,10"',
                  f"set output '{path}'",
                  f'set multiplot layout 1,{len(panels)} title "cordma::stream vs rsocket vs TCP on {meta["device"]} '
                  f'({where(meta, True)}), {meta["mode"]} mode; median of {meta["rounds"]} rounds, bars: min-max"',
                  "set grid", "set key top left"]
        for test, sizes, ylabel, title, xtics, lines in panels:
            script += ["unset logscale", "set logscale x" + ("y" if test == "lat" else ""),
                       f"set xtics ({xtics})", f"set xrange [{sizes[0] / 1.5}:{sizes[-1] * 1.5}]",
                       "set yrange [0:*]" if test == "bw" else "set yrange [*:*]",
                       "set xlabel 'bytes per transfer'", f"set ylabel '{ylabel}'", f"set title '{title}'",
                       "plot " + ", \\\n     ".join(lines)]
        gp.draw(script)
    return True


def main():
    opts, meta = arguments(__doc__, HOST_LOAD)
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
    others = host_load(opts.host_load, everything, lambda r: r["test"] != "verify")
    summary = {"name": name, **meta, "method": method, "how": mode,
               "goals": {"latency_at_most_1x_rsocket": goals["lat"], "bandwidth_at_least_1x_rsocket": goals["bw"]},
               "tables": {k: public(v) for k, v in tables.items()},
               "failures": fails, "host_load": host_load_summary(others),
               "verified": {impl: {"passed": ok, "failed_sizes": bad} for impl, (ok, bad) in verified.items()},
               "measurements": everything}

    md = [f"# cordma::stream vs rsocket vs TCP: {name}", "",
          measured(meta, name, recs, f"rdmacm-utils {meta['rdmacm_utils']}",
                   f"bench/stream/run{' --mode block' if meta['mode'] == 'block' else ''}"), "",
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
    md += host_load_paragraph(others, len(recs))
    md += failures_paragraph(fails)
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
    for test, heading in (("lat", "## Latency (µs per transfer, half a round trip; lower is better)"),
                          ("bw", "## Bandwidth (MB/s, each way in turn; higher is better)")):
        md += ([] if test == "lat" else [""]) + [heading, "", labels,
                                                 "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row in tables[test]:
            c, r, t = row["_cells"]
            md.append(f"| {human(row['bytes'])} | {cell(c)} | {cell(r)} | {cell(t)} | "
                      f"{fmt(row['cordma_over_rsocket'], 2)} | "
                      f"{', '.join(f'{x:.2f}' for x in row['cordma_over_rsocket_per_round']) or '–'} | "
                      f"{fmt(row['cordma_over_tcp'], 2)} | {row['xfers']} x {row['iters']} |")

    def verdict(g):
        return "not measured" if g is None else ("met" if g else "not met")
    md += ["", f"Goal: latency at most 1.0x rsocket's at every size: {verdict(goals['lat'])}; bandwidth at least "
           f"1.0x rsocket's at every size: {verdict(goals['bw'])}.", ""]
    if drew:
        md += [f"![latency and bandwidth against size]({name}.png)", ""]
    write(opts.out, summary, md)


if __name__ == "__main__":
    main()
