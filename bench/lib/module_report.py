"""What the module benchmarks' reports share (bench/rpc/report.py,
bench/stream/report.py, bench/collectives/report.py): their command line,
reading the inside half's raw.jsonl, a figure as the median over the rounds
and its table cell, ratios, the failed measurements, the host's load while
measuring, and drawing with gnuplot. Each report keeps what is its own (its
tables, goals and prose)."""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

import host_samples
from report_format import fmt, human


def arguments(doc, *extra):
    """The reports' command line: --raw, --meta, then each (flag, add_argument's
    keywords) of `extra`, then --out. Returns the options and meta.json's contents."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--raw", required=True, help="raw.jsonl from `run --inside`")
    parser.add_argument("--meta", required=True, help="meta.json from `run --inside`")
    for flag, kwargs in extra:
        parser.add_argument(flag, **kwargs)
    parser.add_argument("--out", required=True, help="path without extension: writes .json, .md, .png")
    opts = parser.parse_args()
    return opts, json.load(open(opts.meta))


HOST_LOAD = ("--host-load", {"help": "host_load.py's samples: other work on the host while measuring"})


def load(raw_path):
    """raw.jsonl's records, one a line; a line that is not JSON is skipped, and said."""
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


def stats(values):
    """A figure over the rounds: {median, min, max, values}, or None if there is none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def cell(s, digits=1, scale=1.0):
    """A table cell: the median, with the lowest and highest in brackets when there are several rounds."""
    if s is None:
        return "–"
    if len(s["values"]) == 1:
        return fmt(s["median"] * scale, digits)
    return f"{fmt(s['median'] * scale, digits)} ({fmt(s['min'] * scale, digits)}–{fmt(s['max'] * scale, digits)})"


def ratio(a, b):
    """a's median over b's, or None."""
    if a is None or b is None or not b["median"]:
        return None
    return a["median"] / b["median"]


def failures(recs, shape=lambda r: ""):
    """One line per failed measurement: which, why, and its last line of output."""
    out = []
    for r in recs:
        if r["rc"] == 0:
            continue
        why = "timed out" if r["rc"] in (124, 137) else ("no result line" if r["rc"] == -1 else f"status {r['rc']}")
        last = next((l for l in reversed(r.get("output_tail", [])) if l.strip()), "")
        out.append(f"round {r['round']} {r['impl']} {r['test']} {shape(r)}{human(r['bytes'])}: {why}"
                   + (f" (`{last.strip()[:160]}`)" if last else ""))
    return out


def failures_paragraph(fails):
    """The report's lines on the failed measurements (none if none failed)."""
    if not fails:
        return []
    return ["Failed measurements (left out of the figures):", ""] + [f"- {f}" for f in fails] + [""]


def host_load(path, everything, timed):
    """The host's 5-s samples of other work while measuring (bench/stream/host_load.py),
    summarized, or None. Each record of `everything` gets the share of the samples
    that cover it (the guest's clock, from which "started" comes, follows the host's),
    and the summary counts the `timed` records that ran while others were busy."""
    others = host_samples.summarize(path)
    if others is None:
        return None
    busy_recs = 0
    for r in everything:
        if "started" not in r:
            continue
        t0, t1 = r["started"], r["started"] + r["seconds"] + 5
        near = [c for t, c, _ in others["raw"] if t0 <= t <= t1]
        r["host_cores_used_by_others"] = round(statistics.mean(near), 2) if near else None
        busy_recs += bool(near) and statistics.mean(near) >= 0.2 and timed(r)
    others["busy_measurements"] = busy_recs
    return others


def host_load_paragraph(others, measured):
    """The report's lines on the host's load (none without samples)."""
    if others is None:
        return []
    return [f"Other work on the host while measuring ({others['samples']} samples, every 5 s): "
            f"{others['mean_cores_used_by_others']:.2f} cores on average, at most "
            f"{others['max_cores_used_by_others']:.2f}, at least 0.2 cores in {others['busy_samples']} samples; "
            f"another VM in {others['samples_with_other_vms']}; "
            f"{others['busy_measurements']} of {measured} measurements ran while others used 0.2 cores or more."
            + (" The host was not quiet: figures measured then are slower and noisier." if others["busy_samples"]
               else " The host was otherwise quiet."), ""]


def public(rows):
    """A table's rows without the report's own keys (those starting with "_"), for NAME.json."""
    return [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]


def where(meta, plot=False):
    """Where the figures were measured, as the report (or its plot's title) says it."""
    if plot:
        return "Soft-RoCE in tools/rxe-vm" if meta.get("in_rxe_vm") else "the host's device"
    return "Soft-RoCE inside tools/rxe-vm" if meta.get("in_rxe_vm") else "the host's RDMA device"


def measured(meta, name, recs, tool, command):
    """The report's first sentence: when, where, on what (`tool`: the other
    program and its version), how long, how many measurements succeeded,
    and the command that made it."""
    good = len([r for r in recs if r["rc"] == 0])
    return (f"Measured {meta['started']} on {meta['device']} ({meta['address']}; {where(meta)}; {meta['cpus']} CPUs; "
            f"kernel {meta['kernel']}; {tool}), {meta['rounds']} rounds, {meta['minutes']:.2f} minutes of measuring, "
            f"{good} of {len(recs)} measurements succeeded. Produced by `{command}`; every measurement and command "
            f"line is in `{name}.json`.")


def host_load_summary(others):
    """The host's load for NAME.json: the summary without its samples."""
    return {k: v for k, v in (others or {}).items() if k != "raw"}


def write(out, summary, md):
    """NAME.json (indented by one) and NAME.md."""
    with open(out + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write("\n".join(md))


class Plot:
    """gnuplot's data files in a temporary folder, and the script that draws them."""

    def __init__(self, folder):
        self.folder = folder

    def data(self, name, rows):
        """Writes `rows` (one a line, values space-separated) to a data file; returns its path."""
        p = os.path.join(self.folder, name)
        with open(p, "w") as f:
            for row in rows:
                f.write(" ".join(str(v) for v in row) + "\n")
        return p

    def draw(self, script):
        """Runs gnuplot on `script` (a list of lines that opens a multiplot,
        which this ends); stops the report if it fails."""
        sp = os.path.join(self.folder, "plot.gp")
        with open(sp, "w") as f:
            f.write("\n".join(script + ["unset multiplot"]) + "\n")
        done = subprocess.run(["gnuplot", sp], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"report.py: gnuplot failed:\n{done.stderr}\n{open(sp).read()}")


@contextlib.contextmanager
def plotting():
    """A Plot whose data files are gone once the block ends."""
    with tempfile.TemporaryDirectory() as tmp:
        yield Plot(tmp)
