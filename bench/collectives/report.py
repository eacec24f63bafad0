#!/usr/bin/env python3
"""bench/collectives/run's report: cordma::group's collectives beside Open MPI's.

Reads the inside half's raw.jsonl (one line per collective, size and program
run, tagged with its round, and one "run" line per program run) and
meta.json; writes NAME.json (everything, and the summary), NAME.md (the
table) and NAME.png (gnuplot, one panel per collective).

Each program run reports, per collective and size, the p50 and p90 of its
per-iteration times; a figure here is the median of those over the rounds,
with the lowest and highest in brackets. The ratio is cordma's median over
Open MPI's: in a TCG VM absolute times drift with the host's load, and only
figures measured close together (the rounds interleave the two programs)
compare. Works with one implementation alone: the other's cells say why
they are empty.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import module_report  # noqa: E402
from module_report import arguments, cell, plotting, public, ratio, stats, where, write  # noqa: E402
from report_format import fmt, human, short  # noqa: E402

OPS = ["barrier", "bcast", "alltoall", "allgather", "allreduce"]
IMPLS = [("cordma", "cordma"), ("mpi", "Open MPI")]
WHAT = {
    "barrier": "MPI_Barrier / group::barrier",
    "bcast": "MPI_Bcast / group::broadcast from rank 0; size = the whole buffer",
    "alltoall": "MPI_Alltoall / group::all_to_all (pairwise); size = one block, per rank pair",
    "allgather": "MPI_Allgather / group::all_gather; size = each rank's block",
    "allreduce": "MPI_Allreduce / group::all_reduce, double, sum; size = the whole buffer",
}


def load(raw_path):
    """raw.jsonl's result lines and its "run" lines (one per program run)."""
    results, runs = [], []
    for rec in module_report.load(raw_path):
        (runs if rec.get("kind") == "run" else results).append(rec)
    return results, runs


def aggregate(results):
    """{(impl, op, bytes): {"p50_us": {median, min, max, values}, "p90_us": ..., "iters": n}}"""
    cells = {}
    for r in results:
        c = cells.setdefault((r["impl"], r["op"], r["bytes"]), {"p50_us": [], "p90_us": [], "iters": r.get("iters")})
        c["p50_us"].append(r["p50_us"])
        c["p90_us"].append(r["p90_us"])
    out = {}
    for key, c in cells.items():
        out[key] = {m: stats(c[m]) for m in ("p50_us", "p90_us")}
        out[key]["iters"] = c["iters"]
    return out


def stat(agg, impl, op, size, metric):
    c = agg.get((impl, op, size))
    return c[metric] if c else None


def impl_status(impl, runs, note):
    """One line on how an implementation's runs went, for the report."""
    mine = [r for r in runs if r["impl"] == impl]
    if not mine:
        return note or "not run"
    bad = [r for r in mine if r["rc"] != 0]
    if not bad:
        return f"{len(mine)} runs, all succeeded"
    reasons = []
    for r in bad:
        why = "timed out after 300 s" if r["rc"] == 124 else f"exit status {r['rc']}"
        last = next((l for l in reversed(r.get("stderr_tail", [])) if l.strip()), "")
        reasons.append(f"round {r['round']}: {why}" + (f" (`{last.strip()[:160]}`)" if last else ""))
    return f"{len(mine) - len(bad)} of {len(mine)} runs succeeded; " + "; ".join(reasons)


def plot(path, meta, agg, sizes):
    with plotting() as gp:
        data = gp.data
        panels = []
        for op in [o for o in OPS if o != "barrier" and o in meta["ops"]]:
            lines = []
            for i, (impl, label) in enumerate(IMPLS):
                rows = [(s, c["median"], c["min"], c["max"]) for s in sizes
                        for c in [stat(agg, impl, op, s, "p50_us")] if c]
                if rows:
                    lines.append(f"'{data(f'{op}-{impl}', rows)}' using 1:2:3:4 with yerrorlines lw 2 "
                                 f"pt {7 if impl == 'mpi' else 5} lc {2 if impl == 'mpi' else 1} title \"{label}\"")
            if lines:
                panels.append((op, lines))
        barrier = []
        if "barrier" in meta["ops"]:
            for i, (impl, label) in enumerate(IMPLS):
                c = stat(agg, impl, "barrier", 0, "p50_us")
                if c:
                    barrier.append((i, c["median"], c["min"], c["max"], label))
        count = len(panels) + (1 if barrier else 0)
        if count == 0:
            return False
        cols = 3 if count > 4 else (2 if count > 1 else 1)
        rows_n = (count + cols - 1) // cols
        xtics = ", ".join(f'"{short(s)}" {s}' for s in sizes)
        xrange = f"[{sizes[0] / 2}:{sizes[-1] * 2}]" if sizes else "[*:*]"
        script = [f'set terminal pngcairo size {520 * cols},{420 * rows_n} font "sans,10"',
                  f"set output '{path}'",
                  f'set multiplot layout {rows_n},{cols} title "cordma::group vs Open MPI (UCX), {meta["ranks"]} ranks on '
                  f'{meta["device"]} ({where(meta, True)}); p50 of per-iteration max over ranks, median of {meta["rounds"]} rounds, '
                  f'bars: min-max"',
                  "set grid", "set key top left", "set ylabel 'microseconds'"]
        for op, lines in panels:
            script += ["set logscale xy", f"set xtics ({xtics})", f"set xrange {xrange}", "set xlabel 'bytes" +
                       (" per block'" if op in ("alltoall", "allgather") else "'"),
                       f"set title '{op}'", "plot " + ", \\\n     ".join(lines)]
        if barrier:
            bfile = data("barrier", [(b[0], b[1], b[2], b[3]) for b in barrier])
            tics = ", ".join(f'"{b[4]}" {b[0]}' for b in barrier)
            script += ["unset logscale", "set logscale y", f"set xtics ({tics})", "set xrange [-0.5:1.5]",
                       "set xlabel ''", "set title 'barrier'", "set style fill solid 0.5", "set boxwidth 0.5",
                       f"plot '{bfile}' using 1:2 with boxes notitle, '' using 1:2:3:4 with yerrorbars lc black "
                       "pt 7 notitle"]
        gp.draw(script)
    return True


def main():
    opts, meta = arguments(__doc__, ("--cordma-note", {"default": "", "help": "why cordma did not run, if it did not"}))
    results, runs = load(opts.raw)
    agg = aggregate(results)
    sizes = sorted({r["bytes"] for r in results if r["op"] != "barrier"})
    name = os.path.basename(opts.out)
    status = {impl: impl_status(impl, runs, opts.cordma_note if impl == "cordma" else "")
              for impl, _ in IMPLS}

    table = []
    for op in OPS:
        for s in ([0] if op == "barrier" else sizes):
            c50, m50 = stat(agg, "cordma", op, s, "p50_us"), stat(agg, "mpi", op, s, "p50_us")
            c90, m90 = stat(agg, "cordma", op, s, "p90_us"), stat(agg, "mpi", op, s, "p90_us")
            if not any((c50, m50)):
                continue
            table.append({"op": op, "bytes": s,
                          "cordma_p50_us": c50 and c50["median"], "mpi_p50_us": m50 and m50["median"],
                          "ratio_p50": ratio(c50, m50),
                          "cordma_p90_us": c90 and c90["median"], "mpi_p90_us": m90 and m90["median"],
                          "ratio_p90": ratio(c90, m90),
                          "iters": (agg.get(("mpi", op, s)) or agg.get(("cordma", op, s)))["iters"],
                          "_cells": (c50, m50, c90, m90)})

    png = opts.out + ".png"
    drew = plot(png, meta, agg, sizes)

    method = ("Each program runs every collective and size: one untimed call whose result every rank checks, "
              "warm-up calls, then N timed calls, each preceded by an untimed barrier. Every rank times its own "
              "call (CLOCK_MONOTONIC); an iteration's time is the largest over the ranks; p50 and p90 are "
              "nearest-rank percentiles of those. Figures here are medians over the rounds (min-max in "
              "brackets); ratios are cordma/Open MPI of those medians (below 1: cordma faster). A run that "
              "failed part-way keeps the figures it printed before failing: each was checked.")
    summary = {"name": name, **meta, "method": method, "status": status,
               "table": public(table), "runs": runs, "results": results}

    md = [f"# cordma::group vs Open MPI collectives: {name}", "",
          f"Measured {meta['started']} on {meta['device']} ({meta['address'] or 'no IPv4 address'}; {where(meta)}; "
          f"{meta['cpus']} CPUs; kernel {meta['kernel']}), {meta['ranks']} ranks, {meta['rounds']} rounds, "
          f"{meta['minutes']:.2f} minutes of measuring. Produced by `bench/collectives/run`; every result is in "
          f"`{name}.json`.", "",
          method, "",
          "| implementation | runs |", "| --- | --- |",
          f"| cordma | {status['cordma']} |", f"| Open MPI | {status['mpi']} |", "",
          "Open MPI:", "", "    " + " ".join(meta["mpi_cmd"]) + " [--iters N --max-size B --ops LIST]", ""]
    if meta.get("cordma_cmd") and any(r["impl"] == "cordma" for r in runs):
        md += ["cordma:", "", "    " + " ".join(meta["cordma_cmd"]) + " [--iters N --max-size B --ops LIST]", ""]
    pkts = {impl: [r["device_sent_pkts"] for r in runs if r["impl"] == impl and r["rc"] == 0] for impl, _ in IMPLS}
    lanes = sorted({l for r in runs if r["impl"] == "mpi" for l in r.get("ucx_lanes", [])})
    if any(pkts.values()) or lanes:
        md += ["Where the traffic went: packets sent on "
               f"{meta['device']} per program run (its hw counter): "
               + "; ".join(f"{label} {', '.join(str(p) for p in pkts[impl])}" for impl, label in IMPLS if pkts[impl])
               + (". UCX's lanes (UCX_LOG_LEVEL=info): " + "; ".join(f"`{l}`" for l in lanes) if lanes else "") + ".",
               ""]
    md += ["## p50 (µs)", "",
           "| collective | size | cordma p50 | Open MPI p50 | ratio | cordma p90 | Open MPI p90 | ratio p90 | iterations |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in table:
        c50, m50, c90, m90 = row["_cells"]
        md.append(f"| {row['op']} | {'–' if row['op'] == 'barrier' else human(row['bytes'])} | {cell(c50)} | "
                  f"{cell(m50)} | {fmt(row['ratio_p50'], 2)} | {cell(c90)} | {cell(m90)} | {fmt(row['ratio_p90'], 2)} | "
                  f"{row['iters']} |")
    if not any(r["impl"] == "cordma" for r in results):
        md += ["", f"cordma: {status['cordma']}; its columns are empty."]
    md += ["", "Sizes: " + "; ".join(f"{op}: {WHAT[op]}" for op in OPS if op in meta["ops"]) + ".", ""]
    if drew:
        md += [f"![p50 vs size]({name}.png)", ""]
    write(opts.out, summary, md)


if __name__ == "__main__":
    main()
